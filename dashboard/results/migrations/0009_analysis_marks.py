# The analysed mark moves from PairLatest.analysed_at to a table of its own (results.AnalysisMark): analysis then
# writes no row that ingest upserts. And spec.repeats: a measurement's repeat index, a cell's median of repeats with
# its interval.

import django.db.models.deletion
from django.db import migrations, models


def copy_marks(apps, schema_editor):
    PairLatest = apps.get_model("results", "PairLatest")
    AnalysisMark = apps.get_model("results", "AnalysisMark")
    marked = PairLatest.objects.filter(analysed_at__isnull=False).values_list("id", "analysed_at")
    AnalysisMark.objects.bulk_create((AnalysisMark(cell_id=i, analysed_at=at) for i, at in marked.iterator()),
                                     batch_size=5000)


def fill_cell_json(apps, schema_editor):
    """Nothing any more: the cells' JSON gained count/low/high here, and 0011_auth_cells, the newest migration that
    changed its fields, rewrites every cell's JSON with its copy of fill_sql (which names columns 0010 and 0011 add)."""


def copy_back(apps, schema_editor):
    PairLatest = apps.get_model("results", "PairLatest")
    AnalysisMark = apps.get_model("results", "AnalysisMark")
    for cell_id, at in AnalysisMark.objects.values_list("cell_id", "analysed_at").iterator():
        PairLatest.objects.filter(id=cell_id).update(analysed_at=at)


class Migration(migrations.Migration):

    dependencies = [
        ('results', '0008_paths'),
    ]

    operations = [
        migrations.CreateModel(
            name='AnalysisMark',
            fields=[
                ('cell', models.OneToOneField(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='mark', serialize=False, to='results.pairlatest')),
                ('analysed_at', models.DateTimeField(help_text='finished_at of the newest measurement change detection has seen')),
            ],
        ),
        migrations.RunPython(copy_marks, copy_back),
        migrations.RemoveField(
            model_name='pairlatest',
            name='analysed_at',
        ),
        migrations.AddField(
            model_name='measurement',
            name='repeat',
            field=models.PositiveSmallIntegerField(blank=True, help_text='which repeat of its setting in the run (spec.repeats)', null=True),
        ),
        migrations.AddField(
            model_name='pairlatest',
            name='high',
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='pairlatest',
            name='low',
            field=models.FloatField(blank=True, help_text='95 % bootstrap interval of that median (3+ repeats)', null=True),
        ),
        migrations.AddField(
            model_name='pairlatest',
            name='repeats',
            field=models.PositiveSmallIntegerField(db_default=1, help_text='succeeded measurements the value is the median of (1: the newest alone)'),
        ),
        migrations.RunPython(fill_cell_json, migrations.RunPython.noop),
    ]
