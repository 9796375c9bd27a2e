"""Federation: clusters. Every node and benchmark gets a cluster (the existing ones the default cluster), names
become unique per cluster, and API tokens may be scoped to one cluster."""

import django.db.models.deletion
from django.db import migrations, models

import results.models

DEFAULT_CLUSTER = "default"  # results.models.DEFAULT_CLUSTER, written out: migrations keep their own values


def default_cluster(apps, schema_editor):
    Cluster = apps.get_model("results", "Cluster")
    cluster, _ = Cluster.objects.get_or_create(name=DEFAULT_CLUSTER)
    for model in ("Node", "Benchmark"):
        apps.get_model("results", model).objects.filter(cluster__isnull=True).update(cluster=cluster)


class Migration(migrations.Migration):

    dependencies = [
        ('results', '0005_tcp_telemetry'),
    ]

    operations = [
        migrations.CreateModel(
            name='Cluster',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=253, unique=True)),
                ('created', models.DateTimeField(auto_now_add=True)),
            ],
            options={'ordering': ['name']},
        ),
        migrations.AddField(
            model_name='node',
            name='cluster',
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.PROTECT, related_name='nodes',
                                    to='results.cluster'),
        ),
        migrations.AddField(
            model_name='benchmark',
            name='cluster',
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.PROTECT,
                                    related_name='benchmarks', to='results.cluster'),
        ),
        migrations.RunPython(default_cluster, migrations.RunPython.noop),
        migrations.AlterField(
            model_name='node',
            name='cluster',
            field=models.ForeignKey(default=results.models.default_cluster,
                                    on_delete=django.db.models.deletion.PROTECT, related_name='nodes',
                                    to='results.cluster'),
        ),
        migrations.AlterField(
            model_name='benchmark',
            name='cluster',
            field=models.ForeignKey(default=results.models.default_cluster,
                                    on_delete=django.db.models.deletion.PROTECT, related_name='benchmarks',
                                    to='results.cluster'),
        ),
        migrations.AlterField(
            model_name='node',
            name='name',
            field=models.CharField(max_length=253),
        ),
        migrations.AlterModelOptions(
            name='node',
            options={'ordering': ['name', 'cluster_id']},
        ),
        migrations.AddConstraint(
            model_name='node',
            constraint=models.UniqueConstraint(fields=('cluster', 'name'), name='node_cluster_name'),
        ),
        migrations.RemoveConstraint(
            model_name='benchmark',
            name='benchmark_namespace_name',
        ),
        migrations.AlterModelOptions(
            name='benchmark',
            options={'ordering': ['namespace', 'name', 'cluster_id']},
        ),
        migrations.AddConstraint(
            model_name='benchmark',
            constraint=models.UniqueConstraint(fields=('cluster', 'namespace', 'name'),
                                               name='benchmark_cluster_namespace_name'),
        ),
        migrations.AddField(
            model_name='apitoken',
            name='cluster',
            field=models.ForeignKey(blank=True, help_text="writes this cluster's records only (empty: any cluster)",
                                    null=True, on_delete=django.db.models.deletion.PROTECT, related_name='tokens',
                                    to='results.cluster'),
        ),
    ]
