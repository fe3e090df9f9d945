import io

from einsat.progress import ProgressDisplay, ProgressEvent


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_plain_lines_when_not_a_terminal_with_steps_throttled():
    out = io.StringIO()
    show = ProgressDisplay(out, interval=3600)
    show(ProgressEvent("saturate", "start"))
    for k in range(5):
        show(ProgressEvent("saturate", step=k, nodes=1000 * k, classes=10 * k, elapsed=0.1 * k))
    show(ProgressEvent("extract", "ilp"))
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and "\r" not in out.getvalue()
    assert lines[0].startswith("saturate") and "step   0" in lines[1] and lines[2].startswith("extract")


def test_one_redrawn_line_on_a_terminal():
    out = Tty()
    show = ProgressDisplay(out)
    show(ProgressEvent("saturate", step=1, nodes=12345, classes=678, elapsed=1.5))
    show(ProgressEvent("saturate", step=2, nodes=9, classes=8, elapsed=2.0))
    show(ProgressEvent("extract", "ilp"))
    show.close()
    text = out.getvalue()
    assert text.count("\r") == 3 and text.count("\n") == 1
    assert "12,345 e-nodes" in text and "678 e-classes" in text
    last_step = text.split("\r")[2]
    assert len(last_step) >= len(text.split("\r")[1])  # the longer line is fully overwritten


def test_the_live_line_moves_on_a_terminal_between_events_and_piped_output_stays_quiet():
    """A long step (a piece in a worker, an egglog phase) sends no event: on a terminal the line
    is redrawn with the run's elapsed time meanwhile; piped, nothing is written between events."""
    import time
    out = Tty()
    show = ProgressDisplay(out, heartbeat=0.05)
    show(ProgressEvent("optimize", "piece 1 of 7 done", nodes=3546))
    time.sleep(0.5)
    redraws = out.getvalue().count("\r")
    show.close()
    assert redraws >= 4 and "piece 1 of 7 done" in out.getvalue().split("\r")[-1]
    assert out.getvalue().split("\r")[-1].rstrip().endswith("s]")  # the elapsed time, on the live line
    piped = io.StringIO()
    show = ProgressDisplay(piped, heartbeat=0.05)
    show(ProgressEvent("optimize", "piece 1 of 7 done"))
    time.sleep(0.3)
    show.close()
    assert piped.getvalue() == "optimize   piece 1 of 7 done\n"


def test_a_note_does_not_tear_the_live_line():
    out = Tty()
    show = ProgressDisplay(out, heartbeat=None)
    show(ProgressEvent("saturate", step=3, nodes=10, classes=5, elapsed=1.0))
    show.note("einsat: Ctrl-C: stopping")
    show.close()
    lines = out.getvalue().split("\n")
    assert lines[1] == "einsat: Ctrl-C: stopping" and "saturate" in lines[0] and "saturate" in lines[2]
