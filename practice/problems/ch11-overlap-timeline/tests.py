import random

from solution import timeline

EXAMPLES = ["test_statement_examples", "test_cpu_cannot_run_two_steps_ahead"]


def _tick_oracle(cpu, gpu, overlap):
    """Unit-time simulation of the CPU and the GPU (positive integer durations only)."""
    n = len(cpu)
    cpu_done, gpu_done = {}, {}
    ci = gi = 0
    cpu_job = gpu_job = None   # [step, remaining]
    t = 0
    while len(gpu_done) < n:
        if cpu_job is None and ci < n:
            if overlap:
                ready = ci < 2 or gpu_done.get(ci - 2, t + 1) <= t
            else:
                ready = ci < 1 or gpu_done.get(ci - 1, t + 1) <= t
            if ready:
                cpu_job, ci = [ci, cpu[ci]], ci + 1
        if gpu_job is None and gi < n and cpu_done.get(gi, t + 1) <= t:
            gpu_job, gi = [gi, gpu[gi]], gi + 1
        for job, finished in ((cpu_job, cpu_done), (gpu_job, gpu_done)):
            if job is not None:
                job[1] -= 1
                if job[1] == 0:
                    finished[job[0]] = t + 1
        if cpu_job is not None and cpu_job[1] == 0:
            cpu_job = None
        if gpu_job is not None and gpu_job[1] == 0:
            gpu_job = None
        t += 1
    total = max(gpu_done.values(), default=0)
    return total, total - sum(gpu)


def test_statement_examples():
    assert timeline([2, 2, 2], [3, 3, 3], overlap=False) == (15, 6), "serial: every CPU and GPU time adds up"
    assert timeline([2, 2, 2], [3, 3, 3], overlap=True) == (11, 2), \
        "overlap: CPU work of steps 1 and 2 hides behind the GPU, total = 2 + 3*3"
    assert timeline([3, 3, 3], [1, 1, 1], overlap=True) == (10, 7)


def test_no_steps():
    assert timeline([], [], overlap=True) == (0, 0)
    assert timeline([], [], overlap=False) == (0, 0)


def test_single_step_is_the_same_either_way():
    assert timeline([4], [5], overlap=True) == timeline([4], [5], overlap=False) == (9, 4)


def test_cpu_cannot_run_two_steps_ahead():
    # c0 0..1, g0 1..11, c1 1..2, g1 11..12; step 2's CPU work waits for the GPU to finish step 0:
    # c2 11..16, g2 16..17.
    total, idle = timeline([1, 1, 5], [10, 1, 1], overlap=True)
    assert (total, idle) == (17, 5), \
        f"got {(total, idle)}: CPU work of step 2 starts only when the GPU has finished step 0 (t=11), so (17, 5)"


def test_invalid_inputs():
    for args in (([1, 2], [1]), ([1], [-1]), ([-2], [1])):
        try:
            timeline(*args, overlap=True)
        except ValueError:
            continue
        raise AssertionError(f"timeline{args} should raise ValueError")


def test_hidden_cpu_gives_cpu0_plus_gpu():
    rng = random.Random(1)
    for _ in range(50):
        n = rng.randint(1, 12)
        gpu = [rng.uniform(1, 5) for _ in range(n)]
        cpu = [rng.uniform(0, 5)] + [rng.uniform(0, gpu[i - 1]) for i in range(1, n)]
        total, idle = timeline(cpu, gpu, overlap=True)
        assert abs(total - (cpu[0] + sum(gpu))) < 1e-9, \
            f"when cpu[i] <= gpu[i-1] the GPU never waits after step 0: total must be cpu[0] + sum(gpu), got {total}"
        assert abs(idle - cpu[0]) < 1e-9


def test_random_against_tick_simulation():
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(1, 8)
        cpu = [rng.randint(1, 6) for _ in range(n)]
        gpu = [rng.randint(1, 6) for _ in range(n)]
        for overlap in (False, True):
            got, want = timeline(cpu, gpu, overlap), _tick_oracle(cpu, gpu, overlap)
            assert got == want, f"timeline({cpu}, {gpu}, overlap={overlap}) = {got}, simulation says {want}"
        assert timeline(cpu, gpu, True)[0] <= timeline(cpu, gpu, False)[0], "overlap can never be slower"
