"""A pod-sized profile session for load tests and benchmarks (issue 18): one session of
N hosts (``plugins/profile/pod/host00.xplane.pb`` ...), each a byte copy of a REAL
profile, the sources taken in turn so that neighbouring hosts differ in size and kind.

Sources: the demo's xplanes (bundled, always there) and, with ``public=True``, the real
GPU/TPU/ROCm xplanes of ``public_profiles/xplane`` in the shared fixtures folder when
this machine has it (``fixtures=``, default :func:`shared_fixtures_dir`: a test passes its
``shared_fixtures`` fixture). The corrupt one is left out: a load test wants a session
that converts."""

from __future__ import annotations

import shutil
from pathlib import Path

from profscope.testing.shared_fixtures import shared_fixtures_dir

DEMO = Path(__file__).resolve().parents[1] / "demo" / "logdir"
PUBLIC = Path("public_profiles") / "xplane"  # in the shared fixtures folder
PUBLIC_NAMES = ("tf_gpu", "tpu_inference", "mi300_jax08_gemm", "mi300_jax_conv_xprof_touched")
SESSION = "pod"


def demo_profiles() -> list[Path]:
    return sorted(DEMO.glob("*/plugins/profile/*/*.xplane.pb"))


def public_profiles(fixtures: Path | None = None) -> list[Path]:
    """The first xplane of each of PUBLIC_NAMES in ``fixtures`` (default: the shared
    fixtures folder when there is one); none without it."""
    fixtures = fixtures if fixtures is not None else shared_fixtures_dir()
    if fixtures is None:
        return []
    found = []
    for name in PUBLIC_NAMES:
        found += sorted((Path(fixtures) / PUBLIC / name).glob("plugins/profile/*/*.xplane.pb"))[:1]
    return found


def host_names(n: int) -> list[str]:
    return [f"host{i:02d}" for i in range(n)]


def build_pod_session(logdir: Path, hosts: int = 16, *, public: bool = False,
                      fixtures: Path | None = None) -> dict[str, Path]:
    """Write the session under ``logdir``; answer {host: the real profile it copies}."""
    sources = demo_profiles() + (public_profiles(fixtures) if public else [])
    assert sources, f"no xplane under {DEMO}"
    folder = Path(logdir) / "plugins" / "profile" / SESSION
    folder.mkdir(parents=True, exist_ok=True)
    made = {}
    for i, host in enumerate(host_names(hosts)):
        made[host] = sources[i % len(sources)]
        shutil.copyfile(made[host], folder / f"{host}.xplane.pb")
    return made
