"""`manage.py locked <command> [args]`: run another management command while holding the database's setup lock.

Each dashboard pod's init container migrates the schema and registers the operator's token when it starts; an
upgrade (or replicas > 1) starts several at once, and two `migrate` runs at once race (both create the same table,
one fails, or both book a migration). Under this lock they run one after the other: the first applies the
migrations, the next finds none left. PostgreSQL: a session advisory lock, released when the command ends or its
connection dies (a killed pod never leaves it held). SQLite has one writer and one pod: no lock.
"""

from __future__ import annotations

import argparse
import time

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

# pg_advisory_lock's 64-bit key: 'tpcmesh' + 'setup' in ASCII, shared by every dashboard release on the database
LOCK_KEY = 0x7470636D657368


class Command(BaseCommand):
    help = "Run a management command (e.g. migrate) under the database's setup lock: one pod at a time."

    def add_arguments(self, parser):
        parser.add_argument("command", help="the management command to run, e.g. migrate")
        parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments and options")

    def handle(self, *args, command, **options):
        if connection.vendor != "postgresql":
            call_command(command, *args)
            return
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEY])
            if not cursor.fetchone()[0]:
                self.stderr.write(f"{command}: waiting for the setup lock (another dashboard pod holds it)")
                start = time.monotonic()
                cursor.execute("SELECT pg_advisory_lock(%s)", [LOCK_KEY])
                self.stderr.write(f"{command}: got the setup lock after {time.monotonic() - start:.1f} s")
        try:
            call_command(command, *args)
        except SystemExit as e:  # a command that exits (argparse) ends here as an error with its code
            raise CommandError(f"{command} exited with {e.code}") from None
        finally:
            if connection.connection is not None:  # the lock lives and dies with this connection
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])
