"""The grid cells' diagnoses (results.models.CellDiagnosis), filled from the measurements 0014 diagnosed that are
still their cell's newest: the next analysis would write them again, but a grid read before it shows them now."""

import django.db.models.deletion
from django.db import migrations, models


def backfill(apps, schema_editor):
    PairLatest = apps.get_model("results", "PairLatest")
    CellDiagnosis = apps.get_model("results", "CellDiagnosis")
    rows = (PairLatest.objects.exclude(measurement__binding_limit="")
            .values_list("id", "measurement_id", "measurement__binding_limit", "measurement__efficiency",
                         "measurement__diagnosis"))
    CellDiagnosis.objects.bulk_create(
        [CellDiagnosis(cell_id=cell, measurement_id=m, binding_limit=limit, efficiency=eff,
                       evidence=(d or {}).get("reason") or "", fix=(d or {}).get("fix") or "")
         for cell, m, limit, eff, d in rows.iterator(chunk_size=2000)], batch_size=2000)


class Migration(migrations.Migration):

    dependencies = [
        ('results', '0014_diagnosis'),
    ]

    operations = [
        migrations.CreateModel(
            name='CellDiagnosis',
            fields=[
                ('cell', models.OneToOneField(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='diagnosis', serialize=False, to='results.pairlatest')),
                ('measurement_id', models.UUIDField(help_text="the measurement judged: the cell's newest when it was")),
                ('binding_limit', models.CharField(help_text="results/diagnosis/limits.py's LIMITS", max_length=20)),
                ('efficiency', models.FloatField(blank=True, help_text="measured ÷ the pair's path capacity (iperf3)", null=True)),
                ('evidence', models.TextField(blank=True, default='', help_text="the model's reason, with its figures")),
                ('fix', models.TextField(blank=True, default='', help_text="the binding limit's fix, citing the figures")),
            ],
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
