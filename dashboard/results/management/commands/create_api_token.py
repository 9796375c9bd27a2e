from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from results import services
from results.models import ApiToken


class Command(BaseCommand):
    help = ("Create an API token and print its key (only a hash is stored). --write allows ingest; --cluster NAME "
            "makes a write token of one cluster's operator (it writes that cluster's records only).")

    def add_arguments(self, parser):
        parser.add_argument("name", help="a unique name for the token, e.g. the operator's namespace")
        parser.add_argument("--write", action="store_true", help="allow ingest (default: read-only)")
        parser.add_argument("--cluster", metavar="NAME",
                            help="scope the token to this cluster's records (implies --write): the token of one "
                                 "cluster's operator in a federation (the chart's cluster.name)")
        parser.add_argument("--key-file", type=Path,
                            help="use the key in this file (e.g. a mounted Kubernetes Secret) instead of a new one; "
                                 "idempotent: an existing token of that name gets this key; prints nothing")

    def handle(self, *args, name, write, cluster=None, key_file=None, **options):
        if cluster is not None:
            cluster = cluster.strip()
            if not cluster:
                raise CommandError("--cluster: give the cluster's name (the chart's cluster.name)")
            write = True
        if key_file is not None:
            try:
                key = key_file.read_text().strip()
            except OSError as e:
                raise CommandError(f"--key-file {key_file}: {e.strerror}") from None
            if len(key) < 16:
                raise CommandError(f"--key-file {key_file}: the key must be at least 16 characters")
            done = services.ensure_api_token(name, key, write=write, cluster=cluster)
            self.stderr.write(f"API token {name!r}: {done}")
            return
        if ApiToken.objects.filter(name=name).exists():
            raise CommandError(f"API token {name!r} exists already; pick another name or delete it in admin")
        _, key = services.create_api_token(name, write=write, cluster=cluster)
        self.stdout.write(key)
