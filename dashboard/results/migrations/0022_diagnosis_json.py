"""The cells' diagnosis JSON moves from CellDiagnosis.members to the cell's own PairLatest row (diagnosis_json, with
the measurement it judged in diagnosis_of): the latest grid's JSON reads one row per cell. Each kept answer is
copied, so a grid read between this migration and the next analysis shows the diagnoses it showed before."""

from django.db import migrations, models


def copy_members(apps, schema_editor):
    # one statement: an archive of a federation has hundreds of thousands of cells
    with schema_editor.connection.cursor() as cur:
        cur.execute("""
            UPDATE results_pairlatest SET
                diagnosis_json = (SELECT cd.members FROM results_celldiagnosis cd
                                  WHERE cd.cell_id = results_pairlatest.id),
                diagnosis_of = (SELECT cd.measurement_id FROM results_celldiagnosis cd
                                WHERE cd.cell_id = results_pairlatest.id)
            WHERE id IN (SELECT cell_id FROM results_celldiagnosis)""")


def copy_back(apps, schema_editor):
    with schema_editor.connection.cursor() as cur:
        cur.execute("""
            UPDATE results_celldiagnosis SET members = coalesce(
                (SELECT p.diagnosis_json FROM results_pairlatest p
                 WHERE p.id = results_celldiagnosis.cell_id AND p.diagnosis_of = results_celldiagnosis.measurement_id),
                '')""")


class Migration(migrations.Migration):

    dependencies = [
        ('results', '0021_window_cells'),
    ]

    operations = [
        migrations.AddField(
            model_name='pairlatest',
            name='diagnosis_json',
            field=models.TextField(blank=True, help_text="the diagnosis' JSON members", null=True),
        ),
        migrations.AddField(
            model_name='pairlatest',
            name='diagnosis_of',
            field=models.UUIDField(blank=True, help_text='the measurement diagnosis_json judged', null=True),
        ),
        migrations.RunPython(copy_members, copy_back),
        migrations.AlterField(  # reversible: back to 0021 the column is filled again by copy_back
            model_name='celldiagnosis',
            name='members',
            field=models.TextField(default='', help_text="the cell's JSON members of these fields "
                                                         "(gridcell.diagnosis_members)"),
        ),
        migrations.RemoveField(
            model_name='celldiagnosis',
            name='members',
        ),
    ]
