from django.db import migrations, models

from results.celljson import fill_sql


def fill_cell_json(apps, schema_editor):
    """PostgreSQL: write the stored JSON of the cells that exist (new ones get it on ingest)."""
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(fill_sql())


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
