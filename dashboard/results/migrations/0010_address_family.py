"""The address family (IPv4, IPv6) a test ran over, and the grid's cells keyed by it and by the congestion control
the test asked for, like streams: an IPv6 or a bbr result no longer overwrites the IPv4 or cubic one of its pair."""

from django.db import migrations, models


def fill_settings(apps, schema_editor):
    """The cells that exist take their newest measurement's congestion control (every stored one is IPv4). Their
    stored JSON gained the two fields here; 0011_auth_cells, which changed its fields again, now rewrites every
    cell's JSON with its copy of fill_sql (which names the column 0011 adds)."""
    table = "results_pairlatest"
    schema_editor.execute(f"""
        UPDATE {table} SET congestion_control = coalesce(
            (SELECT m.congestion_control FROM results_measurement m WHERE m.id = {table}.measurement_id), '')""")


class Migration(migrations.Migration):

    dependencies = [
        ('results', '0009_analysis_marks'),
    ]

    operations = [
        migrations.AddField(
            model_name='measurement',
            name='address_family',
            field=models.CharField(choices=[('ipv4', 'ipv4'), ('ipv6', 'ipv6')], db_default='ipv4', default='ipv4', help_text='the IP version the test ran over (ipv4, ipv6)', max_length=4),
        ),
        migrations.AddField(
            model_name='pairlatest',
            name='address_family',
            field=models.CharField(db_default='ipv4', default='ipv4', max_length=4),
        ),
        migrations.AddField(
            model_name='pairlatest',
            name='congestion_control',
            field=models.CharField(blank=True, db_default='', default='', help_text="empty: the nodes' default", max_length=15),
        ),
        migrations.AddField(
            model_name='change',
            name='address_family',
            field=models.CharField(db_default='ipv4', default='ipv4', max_length=4),
        ),
        migrations.AddField(
            model_name='change',
            name='congestion_control',
            field=models.CharField(blank=True, db_default='', default='', help_text="empty: the nodes' default", max_length=15),
        ),
        migrations.RemoveConstraint(
            model_name='pairlatest',
            name='pairlatest_cell',
        ),
        migrations.RunPython(fill_settings, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name='pairlatest',
            constraint=models.UniqueConstraint(fields=('benchmark', 'protocol', 'streams', 'address_family', 'congestion_control', 'source', 'destination'), name='pairlatest_setting_cell'),
        ),
        migrations.RemoveIndex(
            model_name='measurement',
            name='meas_window',
        ),
        migrations.AddIndex(
            model_name='measurement',
            index=models.Index(fields=['benchmark', 'protocol', 'streams', '-finished_at'], include=('source', 'destination', 'throughput_gbps', 'rtt_ms', 'status', 'address_family', 'congestion_control'), name='meas_window'),
        ),
    ]
