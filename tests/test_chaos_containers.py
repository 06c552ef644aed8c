"""The container driver builds the docker compose commands the local driver's actions correspond to."""

import subprocess

from epochkraft.harness.containers import ComposeService


class Recorder:
    def __init__(self, health: str = "healthy") -> None:
        self.commands: list[list[str]] = []
        self.health = health

    def __call__(self, command):
        self.commands.append(list(command))
        out = self.health if "--format" in command else "abc123\n"
        return subprocess.CompletedProcess(command, 0, stdout=out, stderr="")


def test_kill_wipe_restart_commands():
    recorder = Recorder()
    broker = ComposeService("broker-2", runner=recorder)
    broker.restart(wipe=True)
    assert recorder.commands[0][-4:] == ["kill", "-s", "SIGKILL", "broker-2"]
    assert recorder.commands[1][4:] == [
        "run",
        "--rm",
        "--no-deps",
        "--entrypoint",
        "sh",
        "broker-2",
        "-c",
        "rm -rf /data/*",
    ]
    assert recorder.commands[2][-2:] == ["start", "broker-2"]
    assert broker.alive


def test_pause_resume_and_power_loss():
    recorder = Recorder()
    broker = ComposeService("broker-1", runner=recorder)
    broker.signal("STOP")
    broker.signal("CONT")
    broker.restart(power_loss=True, clean=True)
    assert recorder.commands[0][-2:] == ["pause", "broker-1"]
    assert recorder.commands[1][-2:] == ["unpause", "broker-1"]
    assert recorder.commands[2][-4:] == ["stop", "-t", "15", "broker-1"]
    assert "cut_to_recovery_point('/data')" in recorder.commands[3][-1]
