"""The targets of a capture written the short way (issue 39 item 3, app/capture_targets.py):
ranges (``worker-{0..255}:9999``, ``localhost:{9000..9007}``), a targets file, and
``dns:///NAME:PORT`` for every address a name resolves to, each address through the
capture allow-list. The 8-job test dials real JAX jobs on consecutive loopback ports."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from profscope.app.capture import TargetPolicy
from profscope.app.capture_targets import MAX_TARGETS, expand_dns, parse_targets, read_targets_file
from profscope.app.workspace import Workspace
from profscope.cache.store import DiskCache
from profscope.errors import BadRequest, Forbidden, ProfscopeError
from profscope.server import create_app
from profscope.storage import LogDir
from profscope.testing.profiler_job import profiler_jobs


def test_ranges_lists_and_comments_expand_in_order():
    assert parse_targets("worker-{0..2}:9999") == ["worker-0:9999", "worker-1:9999", "worker-2:9999"]
    assert parse_targets("localhost:{9000..9002}") == ["localhost:9000", "localhost:9001", "localhost:9002"]
    # a bound with a leading zero pads to its width; two ranges multiply
    assert parse_targets("w{08..10}:1") == ["w08:1", "w09:1", "w10:1"]
    assert parse_targets("h{0..1}:{5..6}") == ["h0:5", "h0:6", "h1:5", "h1:6"]
    # a file's text: one a line, # comments, blank lines, commas too; duplicates once
    text = "# the job's hosts\nworker-0:9999  # chief\n\nworker-{0..1}:9999, other:1\n"
    assert parse_targets(text) == ["worker-0:9999", "worker-1:9999", "other:1"]
    assert parse_targets("DNS:///Trainer.svc:9999") == ["dns:///Trainer.svc:9999"]
    # exactly MAX_TARGETS is taken, one more is refused before anything is expanded
    assert len(parse_targets(f"worker-{{0..{MAX_TARGETS - 1}}}:9999")) == MAX_TARGETS == 256
    with pytest.raises(BadRequest) as err:
        parse_targets("a:1, worker-{0..99999999}:9999")
    assert err.value.message == ("targets: 100,000,001 addresses given (worker-{0..99999999}:9999 alone is 100,000,000); "
                                 "one capture takes at most 256 (MAX_TARGETS): capture fewer at a time")
    for bad, words in {"w-{5..1}:1": "the range {5..1} runs backwards", "w-{x..y}:1": "braces that are not a range",
                       "w-{1..2:1": "braces that are not a range", "w-{0..1}": "is not a profiler address",
                       "# nothing\n": "no profiler address given"}.items():
        with pytest.raises(BadRequest, match=None) as err:
            parse_targets(bad, "service_addr")
        assert err.value.message.startswith("service_addr: ") and words in err.value.message, err.value.message


def test_a_targets_file_is_read_and_its_errors_name_it(tmp_path):
    f = tmp_path / "hosts.txt"
    f.write_text("# workers\nworker-{0..3}:8466\n")
    assert parse_targets(read_targets_file(f)) == [f"worker-{i}:8466" for i in range(4)]
    for content, words in ((None, "cannot read it"), (b"\xff\xfe", "is not UTF-8 text"), (b"# none\n", "lists no address")):
        g = tmp_path / "bad.txt"
        if content is None:
            g = tmp_path / "missing.txt"
        else:
            g.write_bytes(content)
        with pytest.raises(ProfscopeError) as err:
            read_targets_file(g)
        assert f"--targets-file '{g}'" in err.value.message and words in err.value.message, err.value.message


def test_a_name_of_several_addresses_is_one_target_each_through_the_allow_list():
    table = {"trainer.svc": ["10.0.0.5", "10.0.0.6", "fd00::7"], "mixed.svc": ["10.0.0.5", "203.0.113.7"],
             "local.svc": ["127.0.0.1", "::1"]}
    policy = TargetPolicy(["10.0.*", "fd00::/16"], resolve=lambda host: table.get(host, []))
    assert expand_dns(policy, "dns:///trainer.svc:9999") == [
        ("10.0.0.5:9999", "10.0.0.5:9999"), ("10.0.0.6:9999", "10.0.0.6:9999"), ("[fd00::7]:9999", "[fd00::7]:9999")]
    assert [t for t, _ in expand_dns(TargetPolicy(resolve=table.get), "dns:///local.svc:1")] == ["127.0.0.1:1", "[::1]:1"]
    # one address outside the list refuses the whole name, naming the address and why
    with pytest.raises(Forbidden) as err:
        expand_dns(policy, "dns:///mixed.svc:9999")
    assert err.value.message.startswith("refused to capture from 203.0.113.7:9999 (mixed.svc resolves to "
                                        "10.0.0.5, 203.0.113.7)") and "--capture-allow" in err.value.message
    # a name pattern that matches the name allows the addresses dialling the name would reach
    assert len(expand_dns(TargetPolicy(["*.svc"], resolve=table.get), "dns:///mixed.svc:1")) == 2
    with pytest.raises(BadRequest, match="nowhere.svc does not resolve here"):
        expand_dns(policy, "dns:///nowhere.svc:1")
    # a plain target is routed as before
    assert expand_dns(policy, "10.0.3.4:1") == [("10.0.3.4:1", "10.0.3.4:1")]


def _consecutive_free_ports(n: int) -> list[int]:
    """``n`` consecutive loopback ports no one listens on now."""
    for base in range(30_000, 60_000, 97):
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return list(range(base, base + n))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError("no free port range")


def test_a_range_over_8_local_jobs_captures_all_8(demo_logdir, tmp_path):
    """Issue 39's proof: `localhost:{P..P+7}` records 8 real jobs at once, through the
    page's route and the CLI's --targets-file; dns:///localhost:P dials the address
    localhost resolves to; an address outside the allow-list is refused with the reason."""
    ports = _consecutive_free_ports(8)
    pattern = f"localhost:{{{ports[0]}..{ports[-1]}}}"
    ws = Workspace(LogDir(str(demo_logdir)), DiskCache(tmp_path / "cache"), capture_dir=tmp_path / "captures")
    client = TestClient(create_app(ws))
    with profiler_jobs(ports):
        started = client.post("/api/capture", json={"targets": pattern, "durationMs": 500})
        assert started.status_code == 202, started.text
        job_id = started.json()["id"]
        deadline = time.monotonic() + 120
        while not (state := client.get(f"/api/capture/job/{job_id}").json())["done"]:
            assert time.monotonic() < deadline, state
            time.sleep(0.2)
        assert state["stage"] == "saved", state
        assert [h["address"] for h in state["hosts"]] == [f"localhost:{p}" for p in ports]
        assert all(h["state"] == "saved" and h["bytes"] > 10_000 for h in state["hosts"]), state["hosts"]
        session = tmp_path / "captures" / "plugins" / "profile" / state["session"]
        assert sorted(f.name for f in session.iterdir()) == sorted(f"localhost_{p}.xplane.pb" for p in ports)

        targets = tmp_path / "targets.txt"
        targets.write_text(f"# the job\n{pattern}\n")
        res = subprocess.run([sys.executable, "-m", "profscope", "capture", "--targets-file", str(targets),
                              "--duration", "300ms", "--dir", str(tmp_path / "cli")],
                             capture_output=True, text=True, timeout=180)
        assert res.returncode == 0, res.stderr
        folder = Path(res.stdout.strip())
        assert len(list(folder.glob("*.xplane.pb"))) == 8, res.stderr

        local = client.post("/api/capture", json={"targets": f"dns:///localhost:{ports[0]}", "durationMs": 300})
        assert local.status_code == 202, local.text
        assert [h["address"] for h in local.json()["hosts"]] == [f"127.0.0.1:{ports[0]}"]
        while not (state := client.get(f"/api/capture/job/{local.json()['id']}").json())["done"]:
            time.sleep(0.1)
        assert state["stage"] == "saved", state

    ws.capture.policy = TargetPolicy(resolve=lambda host: {"job.svc": ["127.0.0.1", "203.0.113.7"]}.get(host, []))
    refused = client.post("/api/capture", json={"targets": "dns:///job.svc:9999"})
    assert refused.status_code == 403 and refused.json()["error"].startswith(
        "refused to capture from 203.0.113.7:9999 (job.svc resolves to 127.0.0.1, 203.0.113.7)"), refused.text
    too_many = client.post("/api/capture", json={"targets": "worker-{0..256}:9999"})
    assert too_many.status_code == 400 and "257 addresses given" in too_many.json()["error"]


def test_the_cli_names_a_bad_range_and_a_missing_targets_file(tmp_path):
    for args, words in ((["w-{5..1}:1"], "targets: 'w-{5..1}:1': the range {5..1} runs backwards"),
                        (["--targets-file", str(tmp_path / "none.txt")], f"--targets-file '{tmp_path / 'none.txt'}': "
                                                                         "cannot read it"),
                        ([], "targets: no profiler address given")):
        res = subprocess.run([sys.executable, "-m", "profscope", "capture", *args, "--dir", str(tmp_path / "c")],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 2 and f"profscope: error: {words}" in res.stderr, res.stderr
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").rglob("*.xplane.pb"))
