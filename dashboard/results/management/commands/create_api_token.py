from django.core.management.base import BaseCommand, CommandError

from results import services
from results.models import ApiToken


class Command(BaseCommand):
    help = "Create an API token and print its key (only a hash is stored). --write allows ingest."

    def add_arguments(self, parser):
        parser.add_argument("name", help="a unique name for the token, e.g. the operator's namespace")
        parser.add_argument("--write", action="store_true", help="allow ingest (default: read-only)")

    def handle(self, *args, name, write, **options):
        if ApiToken.objects.filter(name=name).exists():
            raise CommandError(f"API token {name!r} exists already; pick another name or delete it in admin")
        _, key = services.create_api_token(name, write=write)
        self.stdout.write(key)
