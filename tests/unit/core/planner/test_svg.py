"""Pictures of plans and placements: well-formed SVG with the chips, groups, timeline and memory bars it claims, and
one that a real SVG renderer (cairosvg on the machine's libcairo) renders to a picture that is not blank."""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_hybrid.cli import commands as cli
from ascend_hybrid.gang.layout import Layout
from ascend_hybrid.planner import svg

SVG = "{http://www.w3.org/2000/svg}"


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 12), st.integers(1, 40))
def test_the_drawn_1f1b_schedule_idles_exactly_the_bubble_formula(pipeline, micro_batches):
    ops = svg.one_f_one_b(pipeline, micro_batches)
    assert len(ops) == 2 * pipeline * micro_batches
    makespan = max(end for *_, end in ops)
    busy = svg.FORWARD + svg.BACKWARD
    for stage in range(pipeline):
        assert sum(end - start for s, _, _, start, end in ops if s == stage) == micro_batches * busy
        intervals = sorted((start, end) for s, _, _, start, end in ops if s == stage)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(intervals))  # one thing at a time per stage
    if micro_batches >= pipeline:
        idle = 1 - micro_batches * busy / makespan
        assert idle == pytest.approx((pipeline - 1) / (micro_batches + pipeline - 1))


def seed_svg(capsys, examples, tmp_path, *extra) -> ET.Element:
    path = tmp_path / "seed.svg"
    code = cli.main(["plan", "-f", str(examples / "seed-moe-128.yaml"), "--svg", str(path), *extra])
    captured = capsys.readouterr()
    assert code == 0 and f"wrote {path}" in captured.err
    return ET.parse(path).getroot()


def test_evaluated_seed_picture_has_every_chip_group_and_stage(capsys, examples, tmp_path):
    root = seed_svg(capsys, examples, tmp_path, "--evaluate")
    titles = [t.text for t in root.iter(f"{SVG}title")]
    chips = [t for t in titles if t.startswith("rank ")]
    assert len(chips) == 128 and "rank 127: stage 7, DP 1, TP 7, EP 3" in chips
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert sum(1 for t in texts if re.fullmatch(r"EP \d+", t)) == 32  # 128 ranks / EP 4
    assert "node-0 · stage 0 · DP 0" in texts and "node-15 · stage 7 · DP 1" in texts
    outlines = [r for r in root.iter(f"{SVG}rect") if r.get("stroke") == "black"]
    assert len(outlines) == 16  # one per TP group of 8
    assert any("idle share 17.9 %" in t for t in texts)
    assert sum(1 for t in texts if re.fullmatch(r"stage \d", t)) >= 3 * 8  # legend, timeline and memory rows
    assert any(t.endswith("usable") for t in texts)


def test_render_svg_draws_the_real_racks(capsys, examples, tmp_path):
    path = tmp_path / "placement.svg"
    code = cli.main(["render", "-f", str(examples / "seed-moe-128.yaml"), "--nodes",
                     str(examples / "nodes-16x8.yaml"), "--sched-ip", "127.0.0.1", "--svg", str(path)])
    capsys.readouterr()
    assert code == 0
    texts = [t.text for t in ET.parse(path).getroot().iter(f"{SVG}text")]
    assert "rack rack-0" in texts and "rack rack-1" in texts
    assert any(t.startswith("a2-rack1-07 · stage 7") for t in texts)


def test_a_large_plan_draws_a_bounded_picture():
    layout = Layout(256, 8, 8, 8)
    picture = svg.picture(layout, svg.Cluster.packed(layout, 8), "16 384 NPUs")
    root = ET.fromstring(picture)
    chips = [t for t in root.iter(f"{SVG}title") if t.text.startswith("rank ")]
    assert len(chips) == svg.MAX_NODES_DRAWN * 8
    assert any(t.text == f"… {2048 - svg.MAX_NODES_DRAWN} more nodes, each like the ones above" for t in root.iter(f"{SVG}text"))


def test_a_real_svg_renderer_draws_the_plan_picture(capsys, examples, tmp_path):
    """cairosvg (libcairo) renders the file as a browser would load it: well-formed is not enough."""
    import cairosvg
    from PIL import Image

    root = seed_svg(capsys, examples, tmp_path, "--evaluate")
    width, height = int(root.get("width")), int(root.get("height"))
    png = tmp_path / "seed.png"
    cairosvg.svg2png(url=str(tmp_path / "seed.svg"), write_to=str(png))
    image = Image.open(png).convert("RGB")
    assert image.size == (width, height)
    colours = image.getcolors(maxcolors=1 << 20)
    assert len(colours) > 20, "the rendered picture is (almost) blank"
    present = {colour for _, colour in colours}
    for stage_colour in svg.STAGE_COLOURS[:8]:
        rgb = tuple(int(stage_colour[i:i + 2], 16) for i in (1, 3, 5))
        assert rgb in present, f"stage colour {stage_colour} not drawn"


# --- every label fits -------------------------------------------------------------------------------

def _advance(text: str, size: float, bold: bool) -> float:
    """The width cairo (the renderer the test above uses) gives the text in the machine's sans-serif font."""
    import cairocffi

    context = cairocffi.Context(cairocffi.ImageSurface(cairocffi.FORMAT_ARGB32, 1, 1))
    context.select_font_face("sans-serif", cairocffi.FONT_SLANT_NORMAL,
                             cairocffi.FONT_WEIGHT_BOLD if bold else cairocffi.FONT_WEIGHT_NORMAL)
    context.set_font_size(size)
    return context.text_extents(text)[4]


def _labels_fit(root: ET.Element) -> None:
    width = float(root.get("width"))
    last_box = None
    for element in root:
        if element.tag == f"{SVG}rect" and element.get("fill") == "white" and element.get("stroke") == "#666":
            last_box = element  # a node's box: the label after it must stay inside
        if element.tag != f"{SVG}text":
            continue
        size, bold = float(element.get("font-size")), element.get("font-weight") == "bold"
        advance = _advance(element.text, size, bold)
        assert svg.text_width(element.text, size, "bold" if bold else "normal") >= advance, element.text
        x = float(element.get("x"))
        left = {"start": x, "middle": x - advance / 2, "end": x - advance}[element.get("text-anchor")]
        assert left >= 0 and left + advance <= width, (element.text, left, left + advance, width)
        if element.text.startswith("node-") and last_box is not None:
            assert left + advance <= float(last_box.get("x")) + float(last_box.get("width")), element.text


def test_every_label_of_the_seed_pictures_fits(capsys, examples, tmp_path):
    """The seed case's title ran past the right edge; titles and headings now wrap, boxes grow to their labels."""
    _labels_fit(seed_svg(capsys, examples, tmp_path, "--evaluate"))
    _labels_fit(seed_svg(capsys, examples, tmp_path))


@pytest.mark.parametrize("layout", [Layout(2048, 8, 1, 8), Layout(4, 1, 2, 1), Layout(2, 2, 2, 4, context=2)])
def test_labels_fit_for_five_digit_ranks_one_chip_nodes_and_context_parallelism(layout):
    title = "a very long title " * 12
    _labels_fit(ET.fromstring(svg.picture(layout, svg.Cluster.packed(layout, 8), title)))


def test_long_titles_wrap_at_commas_and_semicolons():
    lines = svg.wrap("job best plan on 128 × 910B: DP 2 × TP 8 × PP 8, EP 4, 32 micro-batches, recompute full; "
                     "step 81.1 s", 14, 400, "bold")
    assert len(lines) > 1 and all(svg.text_width(line, 14, "bold") <= 400 for line in lines)
    assert " ".join(lines).replace("  ", " ").startswith("job best plan")
