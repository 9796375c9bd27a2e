from django.db import migrations, models


def fill_cell_json(apps, schema_editor):
    """The stored JSON of the cells that exist is written by 0009_analysis_marks (the JSON's newest shape): this
    migration called the live celljson.fill_sql, which reads columns added after it."""


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
