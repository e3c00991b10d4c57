"""`evo report`: a self-contained HTML file whose tables hold the metrics and whose images are
the plots; opened in headless Chromium to check that the table and the images render."""

from __future__ import annotations

import base64
import os
import re
import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

import analysis
from evo.cli import main
from tests.analysis_lineages import cid, real_run, write_hand_made_run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REQUIRE_CHROMIUM = os.environ.get("EVO_REQUIRE_CHROMIUM") == "1"


@pytest.fixture(scope="session")
def real_dir(ray_cluster, tmp_path_factory) -> str:
    return real_run(tmp_path_factory)


@pytest.fixture(scope="module")
def hand_dir(tmp_path_factory) -> str:
    return write_hand_made_run(tmp_path_factory.mktemp("hand") / "hand")


class Page(HTMLParser):
    """The report's tables (class -> each such table's rows of cell texts) and images."""

    def __init__(self, text: str):
        super().__init__()
        self.tables: dict[str, list[list[list[str]]]] = {}
        self.images: list[tuple[str, str]] = []
        self._table = self._row = self._cell = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self._table = []
            self.tables.setdefault(a.get("class") or "", []).append(self._table)
        elif tag == "tr" and self._table is not None:
            self._row = []
            self._table.append(self._row)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "img":
            self.images.append((a.get("alt", ""), a.get("src", "")))

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def png_size(src: str) -> tuple[int, int]:
    """Width and height of a PNG data URI (from its IHDR chunk)."""
    assert src.startswith("data:image/png;base64,")
    data = base64.b64decode(src.split(",", 1)[1])
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def by_header(rows: list[list[str]]) -> list[dict[str, str]]:
    return [dict(zip(rows[0], r)) for r in rows[1:]]


def test_evo_report_writes_tables_and_embedded_plots(hand_dir, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", hand_dir, "--out", str(out)]) == 0
    page = Page(out.read_text())
    rows = {(r["workload"], r["precision"]): r for r in by_header(page.tables["workloads"][0])}
    assert set(rows) == {("builtin:wa", "fp32"), ("builtin:wb", "fp32"), ("builtin:wb", "bf16"),
                         ("builtin:wc", "fp32")}  # fmt: skip
    wa = rows[("builtin:wa", "fp32")]
    assert (wa["best vs eager"], wa["best vs compile"], wa["sol_fraction"]) == (
        "2.000", "1.600", "1.000")  # fmt: skip
    assert wa["statuses"] == "correct 5, mismatch 1, compile_error 1, generation_failure 1"
    assert (wa["evaluations"], wa["tokens"], wa["dollars"]) == (
        "7",
        "9050",
        "0.0481",
    )  # 0.04815, as printed
    assert wa["best source"].startswith(cid("A0-3")) and "# source of A0-3" in wa["best source"]
    assert rows[("builtin:wc", "fp32")]["best vs eager"] == "-"
    fast = by_header(page.tables["fast_p"][0])
    fp32_compile = next(r for r in fast if (r["precision"], r["baseline"]) == ("fp32", "compile"))
    assert (fp32_compile["fast_1"], fp32_compile["fast_1.5"]) == ("0.667", "0.333")
    alts = [alt for alt, _ in page.images]
    for wanted in ("best so far against evaluations, per workload", "fast_p against p",
                   "statuses by operator", "statuses by model", "island diversity",
                   "migration effects", "lineage of the best builtin:wa candidate",
                   "best so far against dollars, per workload"):  # fmt: skip
        assert wanted in alts, wanted
    assert all(w > 100 and h > 100 for w, h in (png_size(src) for _, src in page.images))
    assert "evo: report written to" in capsys.readouterr().err


def test_evo_report_names_a_missing_run_and_exits_2(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope"), "--out", str(tmp_path / "r.html")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


def test_several_runs_get_a_side_by_side_comparison(hand_dir, real_dir, tmp_path):
    out = analysis.report.write_report([hand_dir, real_dir], str(tmp_path / "both.html"))
    page = Page(Path(out).read_text())
    comp = {r["run"]: r for r in by_header(page.tables["comparison"][0])}
    assert set(comp) == {"hand", "cpu-run"}
    assert comp["hand"]["models"] == "m1, m2" and comp["cpu-run"]["models"] == "offline"
    assert comp["cpu-run"]["islands per workload"] == "2" and comp["hand"]["evaluations"] == "13"
    assert "offline_mutate" in comp["cpu-run"]["operators"]
    side = by_header(page.tables["side-by-side"][0])
    assert {r["workload"] for r in side} == {"builtin:wa", "builtin:wb"}  # only timed bests
    # the CPU run's own section uses interpreter timings, and says so
    assert "interpreter timings" in Path(out).read_text()
    assert len(page.tables["workloads"][0]) - 1 == 4  # the first run's per-workload table
    # the CPU run (the second section) started its islands from builtin seeds, judged correct
    hand_seeds, cpu_seeds = page.tables["seeds"]
    assert {(r["seed"], r["status"]) for r in by_header(cpu_seeds)} == {("builtin", "correct")}
    assert {r["workload"] for r in by_header(cpu_seeds)} == {
        "builtin:matmul",
        "builtin:scaled_gelu",
    }


_PROBE = """<script>
window.addEventListener("load", () => {
  const imgs = [...document.images], b = document.body;
  const t = document.querySelector("table.workloads");
  b.setAttribute("data-images", imgs.length);
  b.setAttribute("data-decoded", imgs.filter(i => i.complete && i.naturalWidth > 0).length);
  b.setAttribute("data-drawn", imgs.filter(i => i.getBoundingClientRect().height > 50).length);
  b.setAttribute("data-rows", t ? t.tBodies[0].rows.length : -1);
  b.setAttribute("data-table-height", t ? Math.round(t.getBoundingClientRect().height) : 0);
  b.setAttribute("data-first-cell", t ? t.tBodies[0].rows[0].cells[2].innerText : "");
});
</script></body>"""


def test_the_report_renders_in_headless_chromium(real_dir, tmp_path):
    if CHROMIUM is None:
        if REQUIRE_CHROMIUM:
            pytest.fail("EVO_REQUIRE_CHROMIUM=1 but no chromium on PATH (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium); CI installs it")
    out = analysis.report.write_report([real_dir], str(tmp_path / "report.html"))
    probed = tmp_path / "probed.html"
    probed.write_text(Path(out).read_text().replace("</body>", _PROBE))
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=10000", "--window-size=1280,2000"]  # fmt: skip
    dom = subprocess.run([*args, "--dump-dom", probed.as_uri()], capture_output=True,
                         text=True, timeout=180)  # fmt: skip
    body = re.search(r"<body([^>]*)>", dom.stdout)
    assert body, (dom.returncode, dom.stderr[-2000:])
    attrs = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', body.group(1)))
    n_images = len(Page(Path(out).read_text()).images)
    assert int(attrs["images"]) == n_images >= 8
    assert int(attrs["decoded"]) == n_images and int(attrs["drawn"]) == n_images, attrs
    assert int(attrs["rows"]) == 2 and int(attrs["table-height"]) > 40, attrs
    assert attrs["first-cell"] == "builtin:matmul"
    shot = tmp_path / "shot.png"
    subprocess.run([*args, f"--screenshot={shot}", probed.as_uri()], capture_output=True,
                   timeout=180)  # fmt: skip
    import matplotlib.image as mpimg

    pixels = mpimg.imread(shot)[..., :3]
    assert (pixels < 0.9).any(axis=-1).mean() > 0.02  # ink on the page, not a blank


def test_readme_figures_writes_the_trajectory_and_prints_the_fast_p_table(hand_dir, tmp_path,
                                                                          capsys):  # fmt: skip
    from analysis.readme_figures import main as readme_figures

    png = tmp_path / "trajectory.png"
    assert readme_figures([hand_dir, "--out", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "| fp32 | compile | 3 | 0.667 | 0.667 | 0.333 | 0.000 |" in out
    assert "| bf16 | compile | 1 | - | - | - | - |" in out  # never measured
    assert "| fp32 | triton | eager | 2.000x | 2 (3) |" in out  # geomean over those measured
    assert "| bf16 | triton | compile | - | 0 (1) |" in out
    assert "| `builtin:wa` | fp32 | 8 | 2.000x | 1.600x | 1.000 | llm_crossover |" in out
    assert "| `builtin:wb` | bf16 | 2 | 3.000x | - | 0.600 | seed |" in out
    assert readme_figures([str(tmp_path / "nope")]) == 2
