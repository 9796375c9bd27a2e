"""The cells' diagnosis JSON also on the cell's own PairLatest row (diagnosis_json, with the measurement it judged in
diagnosis_of), which the latest grid's JSON now reads: one row per cell. Each answer CellDiagnosis keeps is copied,
so a grid read between this migration and the next analysis shows the diagnoses it showed before.
CellDiagnosis.members stays (expand, then contract): the previous release's pods read it during a rolling upgrade."""

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
        migrations.RunPython(copy_members, migrations.RunPython.noop),
    ]
