"""Local cluster settings, addresses and the use of an external PostgreSQL / Temporal."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy import local_cluster
from deploy.local_cluster import ClusterSettings, cluster_info
from deploy.postgres import without_password


@pytest.fixture(autouse=True)
def _no_external(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("EPOCHAL_DB_URL", "EPOCHAL_TEMPORAL_ADDRESS", "EPOCHAL_TEMPORAL_UI_URL",
                 "EPOCHAL_STATE_DIR"):
        monkeypatch.delenv(name, raising=False)


def test_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    s = ClusterSettings()
    assert s.state_dir == tmp_path / ".epochal" / "cluster"
    assert (s.api_port, s.temporal_port, s.temporal_ui_port, s.postgres_port) == (
        8080, 7233, 8233, 54329)
    assert s.agent_slots >= 1
    assert s.log_file("master") == s.state_dir / "logs" / "master.log"
    assert s.pid_file("agent") == s.state_dir / "run" / "agent.pid"
    info = cluster_info(s)
    assert info.api_url == "http://127.0.0.1:8080"
    assert info.dashboard_url == "http://127.0.0.1:8080/"
    assert info.temporal_address == "127.0.0.1:7233"
    assert info.temporal_ui_url == "http://127.0.0.1:8233"
    # The database asks for a password, made once and readable by the cluster's user alone.
    password_file = s.state_dir / "postgres.password"
    password = password_file.read_text().strip()
    assert len(password) >= 24 and password_file.stat().st_mode & 0o777 == 0o600
    assert info.db_url == f"postgresql://postgres:{password}@127.0.0.1:54329/epochal"
    assert cluster_info(s).db_url == info.db_url
    assert without_password(info.db_url) == "postgresql://postgres:***@127.0.0.1:54329/epochal"


def test_state_dir_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EPOCHAL_STATE_DIR", str(tmp_path / "elsewhere"))
    assert ClusterSettings().state_dir == tmp_path / "elsewhere"


def test_headless_has_no_ui_url(tmp_path: Path) -> None:
    info = cluster_info(ClusterSettings(state_dir=tmp_path, headless_temporal=True, api_port=9))
    assert info.temporal_ui_url is None
    assert info.api_url == "http://127.0.0.1:9"


def test_an_external_temporals_ui_is_the_one_given(tmp_path: Path) -> None:
    def ui(**given: str | None) -> str | None:
        settings = ClusterSettings(state_dir=tmp_path, api_port=9, **given)  # type: ignore[arg-type]
        return cluster_info(settings).temporal_ui_url

    assert ui(external_temporal_address="temporal.internal:7233",
              external_temporal_ui_url=None) is None
    assert ui(external_temporal_address="temporal.internal:7233",
              external_temporal_ui_url="https://temporal.internal") == "https://temporal.internal"
    # Its own dev server's UI otherwise, whatever the environment says.
    assert ui(external_temporal_address=None,
              external_temporal_ui_url="https://elsewhere") == "http://127.0.0.1:8233"


def test_external_servers_are_used_not_started(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    monkeypatch.setenv("EPOCHAL_DB_URL", "postgresql://u@db.example:5432/x")
    monkeypatch.setenv("EPOCHAL_TEMPORAL_ADDRESS", "temporal.example:7233")
    s = ClusterSettings(state_dir=tmp_path)
    info = local_cluster.up(s, parts=("postgres", "temporal"))
    assert info.db_url == "postgresql://u@db.example:5432/x"
    assert info.temporal_address == "temporal.example:7233"
    assert info.temporal_ui_url is None
    assert not (tmp_path / "postgres").exists()
    assert not (tmp_path / "temporal.db").exists()
    assert list((tmp_path / "run").iterdir()) == []


def test_master_gets_its_environment(tmp_path: Path) -> None:
    s = ClusterSettings(state_dir=tmp_path, api_port=18080, postgres_port=15432)
    info = cluster_info(s)
    env = local_cluster._master_env(s, info)
    assert without_password(env["EPOCHAL_DB_URL"]) == (
        "postgresql://postgres:***@127.0.0.1:15432/epochal")
    assert env["EPOCHAL_TEMPORAL_ADDRESS"] == "127.0.0.1:7233"
    assert env["EPOCHAL_API_HOST"] == "127.0.0.1"
    assert env["EPOCHAL_API_PORT"] == "18080"
    assert env["EPOCHAL_CHECKPOINT_DIR"] == str(tmp_path / "checkpoints")
    cluster_id = env["EPOCHAL_CLUSTER_ID"]
    assert cluster_id and local_cluster._master_env(s, info)["EPOCHAL_CLUSTER_ID"] == cluster_id
    cmd = local_cluster._agent_command(s, info)
    assert cmd[1:3] == ["-m", "agent_worker"]
    assert cmd[cmd.index("--master") + 1] == "http://127.0.0.1:18080"
    assert cmd[cmd.index("--agent-id") + 1] == "local-agent"
    assert cmd[cmd.index("--work-dir") + 1] == str(tmp_path / "agent")


def test_a_cluster_on_another_address_listens_and_is_reached_there(tmp_path: Path) -> None:
    s = ClusterSettings(state_dir=tmp_path, host="10.1.2.3", s3=True)
    info = cluster_info(s)
    assert (info.api_url, info.temporal_address, info.s3_endpoint) == (
        "http://10.1.2.3:8080", "10.1.2.3:7233", "http://10.1.2.3:8333")
    env = local_cluster._master_env(s, info)
    assert env["EPOCHAL_API_HOST"] == "10.1.2.3"
    assert '"endpoint_url": "http://10.1.2.3:8333"' in env["EPOCHAL_CHECKPOINT_STORAGE"]
    assert "@127.0.0.1:" in info.db_url  # PostgreSQL serves the master alone
    cmd = local_cluster._agent_command(s, info)
    assert cmd[cmd.index("--temporal") + 1] == "10.1.2.3:7233"


def test_unknown_part_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown cluster parts"):
        local_cluster.up(ClusterSettings(state_dir=tmp_path), parts=("postgres", "gpu"))


def test_status_and_down_of_a_cluster_that_never_ran(tmp_path: Path) -> None:
    s = ClusterSettings(state_dir=tmp_path, api_port=1, temporal_port=1, postgres_port=1)
    st = local_cluster.status(s)
    assert [p.name for p in st.parts] == ["postgres", "temporal", "master", "agent"]
    assert not any(p.running or p.answering for p in st.parts)
    assert not st.all_answering
    assert local_cluster.down(s) == []


def test_status_and_down_find_the_ports_up_saved(tmp_path: Path) -> None:
    from deploy.local_cluster import _save_settings, load_settings

    _save_settings(ClusterSettings(state_dir=tmp_path, api_port=18080, postgres_port=15432))
    loaded = load_settings(tmp_path)
    assert (loaded.api_port, loaded.postgres_port, loaded.temporal_port) == (18080, 15432, 7233)
    assert load_settings(tmp_path, api_port=9999).api_port == 9999
    assert load_settings(tmp_path / "elsewhere").api_port == 8080


def test_unreadable_saved_settings_name_the_file(tmp_path: Path) -> None:
    from deploy.local_cluster import ClusterError, load_settings

    (tmp_path / "cluster.json").write_text("{not json")
    with pytest.raises(ClusterError, match="cluster.json"):
        load_settings(tmp_path)
