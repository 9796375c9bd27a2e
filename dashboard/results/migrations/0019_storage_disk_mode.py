"""Disk mode (#28): a measurement's storage (the contract's record as given, and its setting: memory, disk,
disk-to-memory, memory-to-disk) and the nodes' disk ceilings. The storage is a grid setting of its own, like the
address family: the cells' key gains it (every cell stored so far is memory to memory, the column's default), and
their stored JSON gains the field, rewritten here with this migration's copy of celljson.fill_sql."""


from django.db import migrations, models


# The cells' stored JSON as this migration wrote it (results.celljson.fill_sql of its day, frozen here: a
# migration keeps doing what it did when the live definition, results.gridcell, changes).
FILL_CELL_JSON = """
        UPDATE results_pairlatest p SET cell_json = ('"source":' || to_json(s.name)::text
        || ',"destination":' || to_json(d.name)::text
        || ',"streams":' || (p.streams)::text
        || ',"address_family":' || to_json(p.address_family)::text
        || ',"congestion_control":' || to_json(p.congestion_control)::text
        || ',"auth":' || to_json(p.auth)::text
        || ',"storage":' || to_json(p.storage_setting)::text
        || ',"value":' || coalesce((CASE WHEN p.protocol = 'rtt' THEN p.rtt_ms ELSE p.throughput_gbps END)::text, 'null')
        || ',"finished_at":' || '"' || to_char(p.finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') || '"'
        || ',"status":' || to_json(p.status)::text
        || ',"error":' || coalesce(to_json(p.error)::text, 'null')
        || ',"count":' || (p.repeats)::text
        || ',"low":' || coalesce((p.low)::text, 'null')
        || ',"high":' || coalesce((p.high)::text, 'null'))
        FROM results_node s, results_node d WHERE s.id = p.source_id AND d.id = p.destination_id"""


def fill_cell_json(apps, schema_editor):
    """PostgreSQL keeps the cells' JSON (SQLite builds cells in Python)."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FILL_CELL_JSON)



class Migration(migrations.Migration):

    dependencies = [
        ('results', '0018_loss_summaries'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='dailyrollup',
            name='rollup_cell_day',
        ),
        migrations.RemoveConstraint(
            model_name='pairlatest',
            name='pairlatest_auth_cell',
        ),
        migrations.RemoveIndex(
            model_name='measurement',
            name='meas_window',
        ),
        migrations.AddField(
            model_name='change',
            name='storage_setting',
            field=models.CharField(db_default='memory', default='memory', help_text='memory, disk, disk-to-memory or memory-to-disk (STORAGE_SETTINGS)', max_length=14),
        ),
        migrations.AddField(
            model_name='dailyrollup',
            name='storage_setting',
            field=models.CharField(db_default='memory', default='memory', help_text='memory, disk, disk-to-memory or memory-to-disk (STORAGE_SETTINGS)', max_length=14),
        ),
        migrations.AddField(
            model_name='measurement',
            name='storage',
            field=models.JSONField(blank=True, help_text="where each end kept the files (the contract's storage); null: memory to memory", null=True),
        ),
        migrations.AddField(
            model_name='measurement',
            name='storage_setting',
            field=models.CharField(choices=[('memory', 'memory'), ('disk', 'disk'), ('disk-to-memory', 'disk-to-memory'), ('memory-to-disk', 'memory-to-disk')], db_default='memory', default='memory', help_text='storage as a grid setting (STORAGE_SETTINGS)', max_length=14),
        ),
        migrations.AddField(
            model_name='node',
            name='disk_read_gbps',
            field=models.FloatField(blank=True, help_text="its disk path's read ceiling (fio)", null=True),
        ),
        migrations.AddField(
            model_name='node',
            name='disk_write_gbps',
            field=models.FloatField(blank=True, help_text="its disk path's write ceiling (fio)", null=True),
        ),
        migrations.AddField(
            model_name='pairlatest',
            name='storage_setting',
            field=models.CharField(db_default='memory', default='memory', help_text='memory, disk, disk-to-memory or memory-to-disk (STORAGE_SETTINGS)', max_length=14),
        ),
        migrations.AddIndex(
            model_name='measurement',
            index=models.Index(fields=['benchmark', 'protocol', 'streams', '-finished_at'], include=('source', 'destination', 'throughput_gbps', 'rtt_ms', 'status', 'address_family', 'congestion_control', 'auth', 'storage_setting'), name='meas_window'),
        ),
        migrations.AddConstraint(
            model_name='dailyrollup',
            constraint=models.UniqueConstraint(fields=('benchmark', 'protocol', 'auth', 'streams', 'address_family', 'congestion_control', 'storage_setting', 'source', 'destination', 'day'), name='rollup_storage_cell_day'),
        ),
        migrations.AddConstraint(
            model_name='pairlatest',
            constraint=models.UniqueConstraint(fields=('benchmark', 'protocol', 'auth', 'streams', 'address_family', 'congestion_control', 'storage_setting', 'source', 'destination'), name='pairlatest_storage_cell'),
        ),
        migrations.AlterField(
            model_name='measurement',
            name='binding_limit',
            field=models.CharField(blank=True, db_default='', help_text='the bound the measurement sits at (results/diagnosis/limits.py): network-capacity, receive-window, send-buffer, loss, source-cpu, destination-cpu, protocol, source-storage, destination-storage, unknown; empty: not diagnosed', max_length=20),
        ),
        migrations.RunPython(fill_cell_json, migrations.RunPython.noop),
    ]
