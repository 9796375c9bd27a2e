"""The grid cells' diagnoses (results.models.CellDiagnosis), filled from the measurements 0014 diagnosed that are
still their cell's newest: the next analysis would write them again, but a grid read before it shows them now."""

import json

import django.db.models.deletion
from django.db import migrations, models


def backfill(apps, schema_editor):
    PairLatest = apps.get_model("results", "PairLatest")
    CellDiagnosis = apps.get_model("results", "CellDiagnosis")
    rows = (PairLatest.objects.exclude(measurement__binding_limit="")
            .values_list("id", "measurement_id", "measurement__binding_limit", "measurement__efficiency",
                         "measurement__diagnosis"))
    cells = []
    for cell, m, limit, eff, d in rows.iterator(chunk_size=2000):
        fields = {"binding_limit": limit, "efficiency": eff, "evidence": (d or {}).get("reason") or None,
                  "fix": (d or {}).get("fix") or None}
        # the members as gridcell writes them today (a migration keeps its own copy of what it ran)
        members = ",".join(f"{json.dumps(k)}:{json.dumps(v, ensure_ascii=False)}" for k, v in fields.items())
        cells.append(CellDiagnosis(cell_id=cell, measurement_id=m, binding_limit=limit, efficiency=eff,
                                   evidence=fields["evidence"] or "", fix=fields["fix"] or "", members=members))
    CellDiagnosis.objects.bulk_create(cells, batch_size=2000)


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
                ('members', models.TextField(help_text="the cell's JSON members of these fields (gridcell.diagnosis_members)")),
            ],
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
