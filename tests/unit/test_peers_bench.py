"""The peers benchmark's configurations of OSO kafka-backup (benchmarks/peers_bench.py): what it is asked to do is
what the table says it did. Its engine refuses a key it would ignore (benchmarks/peers/oso/src/main.rs)."""

from __future__ import annotations

from pathlib import Path

import yaml

from benchmarks.peers_bench import oso_backup_config, oso_restore_config


def test_the_oso_backup_is_an_uncompressed_snapshot_whose_progress_stays_in_its_own_directory(tmp_path: Path) -> None:
    config = yaml.safe_load(oso_backup_config(["127.0.0.1:9092", "127.0.0.1:9093"], "bench", tmp_path / "oso"))
    assert config["mode"] == "backup"
    assert config["source"]["bootstrap_servers"] == ["127.0.0.1:9092", "127.0.0.1:9093"]
    assert config["source"]["topics"]["include"] == ["bench"]
    assert config["storage"] == {"backend": "filesystem", "path": str(tmp_path / "oso")}
    assert config["backup"] == {"compression": "none", "stop_at_current_offsets": True}
    # By default ./offsets.db: a second run with the same backup id would resume there and back up nothing.
    assert config["offset_storage"] == {"backend": "sqlite", "db_path": str(tmp_path / "oso" / "offsets.db")}


def test_the_oso_restore_maps_the_topic_onto_a_new_one_it_creates(tmp_path: Path) -> None:
    config = yaml.safe_load(oso_restore_config(["127.0.0.1:9092"], "bench", "oso-target", tmp_path))
    assert config["mode"] == "restore"
    assert config["target"]["topics"]["include"] == ["bench"]
    assert config["restore"] == {"create_topics": True, "topic_mapping": {"bench": "oso-target"}}
    assert config["storage"]["path"] == str(tmp_path)
