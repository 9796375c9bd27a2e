from django.db import migrations, models


def fill_cell_json(apps, schema_editor):
    """Nothing any more: today's fill_sql names columns added later, and the newest migration that changed the JSON's
    fields (0011_auth_cells) (re)writes every cell's JSON itself, with its own frozen copy of fill_sql. A migration
    that changes those fields does the same; earlier ones must not."""


class Migration(migrations.Migration):

    dependencies = [
        ('results', '0002_grid_window_covering_index'),
    ]

    operations = [
        migrations.AddField(
            model_name='pairlatest',
            name='cell_json',
            field=models.TextField(blank=True, help_text="PostgreSQL: the cell's JSON but age, staleness and state (celljson.py)", null=True),
        ),
        migrations.RunPython(fill_cell_json, migrations.RunPython.noop),
    ]
