"""The profiler-analysis actor: profiles, ncu parsing, capture, rule and LLM analysts, Ray."""

import dataclasses
import json
import os
from pathlib import Path

import pytest

from fitness.ncu import unsupported_metrics
from fitness.profiling import ProfileError, capture_profile, kernel_names
from fitness.results import EvalResult, Status
from fitness.workloads import resolve_workload
from operators.analyst import (
    NCU_METRICS,
    TUNABLE_KINDS,
    AnalystService,
    KernelRow,
    LLMAnalyst,
    NcuKernel,
    Profile,
    Recommendation,
    Roofline,
    RuleAnalyst,
    analyst_actor_class,
    first_paragraph,
    parse_ncu_csv,
    save_profile,
)

FIXTURES = Path(__file__).parent / "profiles"
H100 = "NVIDIA H100 80GB HBM3"
TINY = {"ROWS": 16, "COLS": 128}


def load(name: str) -> Profile:
    return Profile.from_json((FIXTURES / f"{name}.json").read_text())


def without_ncu(profile: Profile) -> Profile:
    return dataclasses.replace(profile, ncu=[])


@pytest.fixture(scope="module")
def tiny_gelu():
    workload = resolve_workload("builtin:scaled_gelu", overrides=TINY)
    return workload, workload.seed_path.read_text()


# ---------------------------------------------------------------- the rule analyst


@pytest.mark.parametrize("strip_ncu", [False, True], ids=["ncu", "no-ncu"])
def test_memory_and_compute_bound_profiles_get_different_advice(strip_ncu):
    memory, compute = load("memory_bound"), load("compute_bound")
    if strip_ncu:
        memory, compute = without_ncu(memory), without_ncu(compute)
    mem = RuleAnalyst().recommend(memory)
    comp = RuleAnalyst().recommend(compute)
    assert (mem.kind, comp.kind) == ("memory_bound", "compute_bound")
    assert mem.text != comp.text
    assert "BLOCK_SIZE" in mem.text and "vectorize" in mem.text.lower()
    assert "BLOCK_M/BLOCK_N" in comp.text and "num_stages" in comp.text
    assert mem.params_hint["block"] == +1 and mem.params_hint["warps"] == +1
    assert comp.params_hint == {"block": +1, "stages": +1, "group": +1}
    for rec in (mem, comp):
        assert set(rec.params_hint) <= set(TUNABLE_KINDS)
        assert set(rec.params_hint.values()) <= {-1, +1}


def test_memory_bound_advice_cites_the_measured_numbers():
    with_ncu = RuleAnalyst().recommend(load("memory_bound"))
    assert "DRAM at 62%" in with_ncu.text and "62% of speed of light" in with_ncu.text
    # long_scoreboard dominates the stalls: pipelining the loads is part of the advice
    assert with_ncu.params_hint["stages"] == +1
    assert "stages" not in RuleAnalyst().recommend(without_ncu(load("memory_bound"))).params_hint


def test_measured_dram_and_sm_outrank_the_roofline_model():
    profile = load("compute_bound")
    profile.ncu[0].dram_pct, profile.ncu[0].sm_pct = 88.0, 30.0
    rec = RuleAnalyst().recommend(profile)
    assert rec.kind == "memory_bound"
    assert "DRAM near its peak" in rec.text and rec.params_hint == {"block": +1}


def test_saturated_sms_get_advice_to_cut_instructions():
    profile = load("compute_bound")
    profile.ncu[0].sm_pct = 91.0
    rec = RuleAnalyst().recommend(profile)
    assert rec.kind == "compute_bound" and "instructions" in rec.text


def test_occupancy_limited_by_registers_asks_for_smaller_tiles_and_fewer_warps():
    rec = RuleAnalyst().recommend(load("occupancy_limited"))
    assert rec.kind == "occupancy_limited"
    assert "168 registers" in rec.text and "12%" in rec.text
    assert rec.params_hint == {"block": -1, "warps": -1}


def test_a_gemm_that_keeps_its_sms_issuing_is_not_called_occupancy_limited():
    """A real H100 profile (the matmul seed, 12% occupancy by design, warps waiting for an
    issue slot): the advice is about compute, not about shrinking the tiles."""
    profile = load("h100_matmul_seed")
    (k,) = profile.ncu
    assert k.occupancy_pct < 35 and k.top_stall()[0] == "not_selected"
    rec = RuleAnalyst().recommend(profile)
    assert rec.kind == "compute_bound" and rec.params_hint.get("block", 0) >= 0


def test_occupancy_limited_by_shared_memory_asks_for_fewer_stages():
    profile = load("occupancy_limited")
    profile.ncu[0].registers = 64
    profile.ncu[0].smem_dynamic = 180 * 1024
    rec = RuleAnalyst().recommend(profile)
    assert rec.kind == "occupancy_limited" and "180 KiB" in rec.text
    assert rec.params_hint == {"stages": -1, "block": -1}


def test_many_tiny_launches_are_launch_bound_and_asked_to_fuse():
    rec = RuleAnalyst().recommend(load("launch_bound"))
    assert rec.kind == "launch_bound"
    assert "5 kernel launches per forward" in rec.text and "Fuse" in rec.text
    assert "_var_kernel" in rec.text
    assert rec.params_hint == {}


def test_one_long_kernel_is_not_launch_bound():
    profile = load("launch_bound")
    profile.kernels = [KernelRow("_fused", 3, 180.0, own=True)]
    assert RuleAnalyst().recommend(profile).kind != "launch_bound"


def test_one_short_kernel_in_a_long_call_is_host_bound():
    profile = load("launch_bound")
    profile.kernels = [KernelRow("_fused", 3, 30.0, own=True)]  # 10 us of a 61 us call
    rec = RuleAnalyst().recommend(profile)
    assert rec.kind == "launch_bound" and rec.text.startswith("Host-bound")
    assert "16%" in rec.text


def test_kernels_the_candidate_did_not_write_are_a_fallback():
    profile = load("compute_bound")
    profile.kernels.append(KernelRow("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n", 3, 20000.0))
    rec = RuleAnalyst().recommend(profile)
    assert rec.kind == "fallback" and "sm90_xmma_gemm" in rec.text


def test_idle_hardware_with_a_small_grid_asks_for_more_programs():
    profile = load("memory_bound")
    k = profile.ncu[0]
    k.dram_pct, k.sm_pct, k.grid_size = 12.0, 9.0, 64
    rec = RuleAnalyst().recommend(profile)
    assert rec.kind == "latency_bound" and "64 programs" in rec.text
    assert rec.params_hint == {"block": -1}
    k.grid_size = 100_000  # enough programs; warps wait on loads instead
    rec = RuleAnalyst().recommend(profile)
    assert rec.kind == "latency_bound" and rec.params_hint == {"stages": +1, "warps": +1}


def test_near_speed_of_light_only_fine_tuning_is_left():
    profile = load("memory_bound")
    profile.roofline.sol_fraction = 0.91
    rec = RuleAnalyst().recommend(profile)
    assert rec.kind == "near_sol" and "91%" in rec.text


def test_a_cpu_profile_is_judged_against_the_nominal_ridge():
    roof = Roofline.build(2 * 512**3, 3 * 512 * 512 * 4, "cpu", runtime_ms=1.0)  # 85 FLOP/B
    assert roof.ridge is None and roof.sol_ms is None
    profile = Profile("builtin:matmul", "cpu", roofline=roof)
    rec = RuleAnalyst().recommend(profile)
    assert rec.kind == "compute_bound" and "nominal H100" in rec.text


def test_a_profile_without_numbers_says_so():
    rec = RuleAnalyst().recommend(Profile("w", "cpu"))
    assert rec.kind == "unknown" and rec.params_hint == {}


# ---------------------------------------------------------------- profile records


def test_profile_json_round_trip():
    for name in ("memory_bound", "compute_bound", "occupancy_limited", "launch_bound"):
        profile = load(name)
        again = Profile.from_json(profile.to_json())
        assert again == profile
        assert isinstance(again.ncu[0] if again.ncu else NcuKernel("x"), NcuKernel)
    newer = json.loads(load("memory_bound").to_json()) | {"added_later": 1}
    assert Profile.from_dict(newer) == load("memory_bound")


def test_roofline_from_an_eval_result():
    res = EvalResult(Status.CORRECT, "ok", device=H100, runtime_ms=4.0, sol_ms=2.0)
    res.metrics.update(flops=2.0 * 4096**3, min_bytes=3.0 * 4096**2 * 4)
    roof = Roofline.from_result(res)
    assert roof.sol_fraction == pytest.approx(0.5)
    assert roof.ridge == pytest.approx(67e12 / 3.35e12)
    assert roof.intensity == pytest.approx(2 * 4096 / 12)


def test_save_profile_writes_under_artifacts(tmp_path):
    path = save_profile(tmp_path, "run1/island 0/#17", load("compute_bound"))
    assert path.parent == tmp_path / "artifacts" / "profiles"
    assert path.name == "run1_island_0__17.json"
    assert Profile.from_json(path.read_text()) == load("compute_bound")


# ---------------------------------------------------------------- Nsight Compute CSV


def test_ncu_csv_is_parsed_per_kernel_and_averaged_over_launches():
    kernels = {k.name: k for k in parse_ncu_csv((FIXTURES / "ncu_details.csv").read_text())}
    assert set(kernels) == {"_scaled_gelu_kernel", "matmul_kernel"}
    gelu, mm = kernels["_scaled_gelu_kernel"], kernels["matmul_kernel"]
    assert gelu.launches == 2 and mm.launches == 1
    assert gelu.dram_pct == pytest.approx((61.52 + 62.08) / 2)
    assert gelu.duration_us == pytest.approx((518.944 + 517.920) / 2)  # "518,944" nsecond
    assert gelu.grid_size == 131072 and gelu.registers == 26
    assert mm.smem_bytes == pytest.approx(49150)  # "49.15" Kbyte/block
    assert mm.duration_us == pytest.approx(4107.232)
    # "selected" is not a stall and "n/a" is no value; shares add up to one
    assert set(gelu.stalls) == {"long_scoreboard", "wait", "lg_throttle"}
    assert sum(gelu.stalls.values()) == pytest.approx(1.0, abs=1e-3)
    assert gelu.top_stall()[0] == "long_scoreboard"
    assert mm.top_stall()[0] == "math_pipe_throttle"


def test_ncu_output_without_a_table_gives_no_kernels():
    assert parse_ncu_csv("==PROF== Connected to process 1\n==ERROR== no kernels\n") == []


def test_kernel_names_of_triton_and_cuda_sources(tiny_gelu):
    _, source = tiny_gelu
    assert kernel_names(source) == ["_scaled_gelu_kernel"]
    cuda = 'src = """\n__global__ void row_sum_kernel(const float* x, float* y, int n) {}\n"""'
    assert kernel_names(cuda) == ["row_sum_kernel"]
    bounded = "__global__ __launch_bounds__(THREADS) void softmax_rows_kernel(const float* x)"
    assert kernel_names(bounded) == ["softmax_rows_kernel"]
    templated = "template <int N>\n__global__ static void tile_kernel(float* y) {}"
    assert kernel_names(templated) == ["tile_kernel"]


# ---------------------------------------------------------------- capture


def test_capture_on_the_cpu_returns_the_op_table_and_roofline(tiny_gelu):
    workload, source = tiny_gelu
    profile = capture_profile(source, workload, "cpu", timeout_s=120)
    assert profile.kernels and all(k.calls > 0 for k in profile.kernels)
    assert profile.device_kind == "cpu" and profile.calls == 3
    assert profile.workload == "builtin:scaled_gelu"
    assert profile.roofline.min_bytes == 2 * 16 * 128 * 4  # input and output, fp32
    assert profile.roofline.runtime_ms > 0
    assert profile.ncu == []
    assert RuleAnalyst().recommend(profile).kind == "memory_bound"


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to the sandbox user needs root")
def test_a_root_caller_profiles_the_candidate_as_the_sandbox_user_offline(tiny_gelu):
    """The profiled candidate is untrusted code: as in the judge, it runs as `nobody`, with
    no network and no secrets in its environment."""
    import pwd
    import socket

    workload, source = tiny_gelu
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    # The sandbox has no way out but its exit: the spy reports what it saw in its error.
    spy = (
        "import json, os, socket\n"
        "try:\n"
        "    s = socket.socket()\n"
        "    s.settimeout(2)\n"
        f"    s.connect((b'127.0.0.1', {server.getsockname()[1]}))\n"
        "    net = True\n"
        "except OSError:\n"
        "    net = False\n"
        "raise SystemExit('SPY' + json.dumps({'uid': os.getuid(), 'net': net, "
        "'secret': os.environ.get('EVO_TEST_SECRET')}) + 'SPY')\n"
    )
    os.environ["EVO_TEST_SECRET"] = "do-not-leak"
    try:
        with pytest.raises(ProfileError) as caught:
            capture_profile(spy + source, workload, "cpu", timeout_s=120, run_as="nobody")
    finally:
        del os.environ["EVO_TEST_SECRET"]
        server.close()
    seen = json.loads(str(caught.value).split("SPY")[1])
    assert seen == {"uid": pwd.getpwnam("nobody").pw_uid, "net": False, "secret": None}


def test_a_crashing_candidate_is_one_clear_error(tiny_gelu):
    workload, source = tiny_gelu
    broken = source.replace("x = x.contiguous()", "raise RuntimeError('kaboom in forward')")
    with pytest.raises(ProfileError, match="exited with 1") as info:
        capture_profile(broken, workload, "cpu", timeout_s=120)
    assert "kaboom in forward" in str(info.value)


def test_a_hanging_candidate_times_out(tiny_gelu):
    workload, source = tiny_gelu
    hanging = source.replace("x = x.contiguous()", "__import__('time').sleep(600)")
    with pytest.raises(ProfileError, match="timed out after 0.5 s"):
        capture_profile(hanging, workload, "cpu", timeout_s=0.5)


# ---------------------------------------------------------------- LLM analyst


def test_llm_analyst_takes_the_first_paragraph_and_keeps_the_rules_hint():
    prompts = []

    def complete(prompt: str) -> str:
        prompts.append(prompt)
        return "\n\n  Raise BLOCK_SIZE to 4096:\nDRAM is at 62%.\n\nSecond paragraph, ignored."

    profile = load("memory_bound")
    rec = LLMAnalyst(complete).recommend(profile)
    assert rec.text == "Raise BLOCK_SIZE to 4096: DRAM is at 62%."
    assert rec.kind == "llm:memory_bound"
    assert rec.params_hint == RuleAnalyst().recommend(profile).params_hint
    assert "_scaled_gelu_kernel" in prompts[0] and "long_scoreboard 62%" in prompts[0]
    assert "memory_bound" in prompts[0]


@pytest.mark.parametrize("reply", [RuntimeError("rate limited"), "", "\n \n"])
def test_llm_analyst_falls_back_to_the_rules(reply):
    def complete(prompt: str) -> str:
        if isinstance(reply, Exception):
            raise reply
        return reply

    profile = load("compute_bound")
    rule = RuleAnalyst().recommend(profile)
    rec = LLMAnalyst(complete).recommend(profile)
    assert rec.kind == "fallback:compute_bound"
    assert (rec.text, rec.params_hint) == (rule.text, rule.params_hint)
    assert rec.note


def test_first_paragraph():
    assert first_paragraph("\n\n  a\n b \n\nc") == "a b"
    assert first_paragraph("   ") == ""


# ---------------------------------------------------------------- the actor


def test_actor_on_ray_recommends_as_the_class_does(ray_cluster, tmp_path, tiny_gelu):
    actor = analyst_actor_class().remote()
    for name in ("memory_bound", "compute_bound"):
        profile = load(name)
        got = ray_cluster.get(actor.recommend.remote(profile.to_json()))
        assert Recommendation.from_dict(got) == RuleAnalyst().recommend(profile)
    workload, source = tiny_gelu
    out = ray_cluster.get(
        actor.analyse.remote(
            source,
            "builtin:scaled_gelu",
            "cpu",
            overrides=TINY,
            run_dir=str(tmp_path),
            candidate_id="c-1",
        )
    )
    assert out["error"] == "" and out["recommendation"]["kind"] == "memory_bound"
    assert out["profile_path"] == str(tmp_path / "artifacts" / "profiles" / "c-1.json")
    ray_cluster.kill(actor)


def test_analyse_reports_a_bad_workload_instead_of_raising():
    out = AnalystService().analyse("x = 1", "builtin:no_such_workload", "cpu")
    assert out["recommendation"] is None and "no_such_workload" in out["error"]


def test_metrics_an_ncu_lacks_are_found_in_its_error_lines():
    output = (
        "==PROF== Connected to process 7\n"
        "==ERROR== Failed to find metric smsp__average_warps_issue_stalled_membar_per_issue_active"
        ".ratio\n"
        "==WARNING== dram__throughput.avg.pct_of_peak_sustained_elapsed is approximate\n"
    )
    missing = unsupported_metrics(output, list(NCU_METRICS))
    assert missing == {"smsp__average_warps_issue_stalled_membar_per_issue_active.ratio"}


def test_llm_analyst_renders_a_template_given_in_place_of_the_default(tmp_path):
    template = tmp_path / "my_analyst.j2"
    template.write_text("{{ profile.workload }} is {{ rule.kind }}; DRAM {{ 61.8 | num('.0f') }}%")
    prompts = []
    analyst = LLMAnalyst(lambda p: prompts.append(p) or "ok", template=template)
    assert analyst.recommend(load("memory_bound")).text == "ok"
    assert prompts == ["builtin:scaled_gelu is memory_bound; DRAM 62%"]
