"""Progress for long jobs whose output goes to a log file: ``ProgressLines`` (Python loops)
and ``scripts/progress.sh`` (stages, and a line after each silent stretch of a command)."""

import os
import subprocess
from pathlib import Path

from robot_rl.runtime.progress import ProgressLines

ROOT = Path(__file__).resolve().parents[1]


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_progress_lines_come_every_interval_and_at_the_end_with_rate_eta_and_figures():
    clock, lines = FakeClock(), []
    progress = ProgressLines("classifier training", 400, every_s=15, log=lines.append, clock=clock)
    for step in range(1, 401):
        clock.t = step / 10  # 10 steps/s: a line every 150 steps
        progress.update(step, loss=0.0234)
    assert lines[0] == "classifier training: step 150/400 (38%), 10.0 steps/s, ETA 25 s, loss 0.0234"
    assert lines[1].startswith("classifier training: step 300/400 (75%)")
    assert lines[-1] == "classifier training: step 400/400 (100%), 10.0 steps/s, took 40 s, loss 0.0234"
    assert len(lines) == 3


def test_a_short_loop_prints_only_its_last_line_and_a_resumed_one_counts_its_own_rate():
    clock, lines = FakeClock(), []
    progress = ProgressLines("evaluation", 3, unit="episodes", log=lines.append, clock=clock)
    for episode in range(1, 4):
        clock.t += 2
        assert progress.due(episode) == (episode == 3)
        progress.update(episode, success="0.67")
    assert lines == ["evaluation: episode 3/3 (100%), 0.50 episodes/s, took 6 s, success 0.67"]
    clock, lines = FakeClock(), []
    resumed = ProgressLines("train", 10_000, every_s=15, log=lines.append, clock=clock, first=7_500)
    clock.t = 100
    resumed.update(8_000)  # 500 steps in 100 s, not 8,000
    assert lines == ["train: step 8000/10000 (80%), 5.0 steps/s, ETA 6.7 min"]
    resumed.update(8_001)
    assert len(lines) == 1  # within the interval
    resumed.update(8_002, force=True)
    assert len(lines) == 2


def run_guarded(command: str, tmp_path: Path, on_line=None):
    """``quiet_guard`` from scripts/progress.sh around ``command`` (bash), with a 0.2 s interval;
    ``on_line(line, fifo)`` sees each output line as it comes."""
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    script = f'source "{ROOT}/scripts/progress.sh"; STAGES=1; stage "waiting" "a moment"; quiet_guard bash -c \'{command}\''
    proc = subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PROGRESS_EVERY": "0.2", "FIFO": str(fifo)})
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if on_line is not None:
            on_line(lines[-1], fifo)
    return proc.wait(timeout=60), lines


def test_a_silent_command_gets_still_running_lines_and_its_output_and_exit_status_pass_through(tmp_path):
    released = []

    def release_once_a_still_running_line_appeared(line, fifo):
        if "still running" in line and not released:
            released.append(line)
            fifo.write_text("go\n")  # the command waits on the fifo: no sleep, no clock

    rc, lines = run_guarded('echo first; printf "part of "; read x < "$FIFO"; echo "a line"; exit 3', tmp_path,
                            release_once_a_still_running_line_appeared)
    assert rc == 3
    assert lines[0] == "== stage 1 of 1: waiting (expected a moment; job time 0:00) =="
    output = [line for line in lines[1:] if "still running" not in line]
    assert output == ["first", "part of a line"]  # a partial line is kept whole across the heartbeat
    assert released and released[0].startswith("   ... still running: waiting (0:0")


def test_a_chatty_command_gets_no_heartbeat(tmp_path):
    rc, lines = run_guarded("for i in 1 2 3; do echo $i; done", tmp_path)
    assert rc == 0 and lines[1:] == ["1", "2", "3"]
