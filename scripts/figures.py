"""The data-parallel baseline that every published "N× fewer bytes" figure is set against, in one place.

A run's `summary` (the `--json` line of `archipelago train`) carries `bytes_ddp_equivalent`: what a
data-parallel job of the same M workers would send for the same tokens. Two formulas have been
written into result files:

  - ring all-reduce (what data-parallel really does; files with a `ddp_bytes_basis` key): each
    worker sends 2(M-1)/M of the fp32 gradients per step, 0 at M = 1 (one worker sends nothing);
  - parameter server (older files, without `ddp_bytes_basis`): every worker sends its fp32
    gradients up and receives the parameters down each step, 2 x P x 4 bytes per worker-step.

The ring figure of an older file is its figure x (M-1)/M exactly. Where a measured data-parallel
job (`train.mode = "ddp"` on the actor engine, gloo, `bytes_measured: true`) ran at the same tokens,
a ratio is against its measured `bytes_sent` instead, and says so.

    ring_bytes(summary)        the ring all-reduce bytes (None at M <= 1)
    ddp_ratio(summary)         ring bytes / bytes sent (None at M <= 1)
    baseline(summary, ddp)     (bytes, "measured" | "computed") of the baseline a row is set against
    fmt_ratio(r)               "158×", or "—" for None
"""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RING_TEXT = "data-parallel's ring all-reduce of fp32 gradients"


def summary_of(result):
    """A result file's summary: bench/run's files hold it under "summary"; a default run's file is the summary."""
    return result["summary"] if "summary" in result and isinstance(result["summary"], dict) else result


def learners(result):
    return int(summary_of(result)["learners"])


def ring_bytes(result):
    """What data-parallel's ring all-reduce sends for the same tokens (computed); None at M <= 1."""
    s = summary_of(result)
    m = int(s["learners"])
    if m <= 1:
        return None
    if "ddp_bytes_basis" in s:
        return s["bytes_ddp_equivalent"]
    return s["bytes_ddp_equivalent"] * (m - 1) / m  # the parameter-server figure of an older file


def is_measured_ddp(result):
    """Whether a result is a measured data-parallel job (gloo workers, bytes read off their sockets)."""
    s = summary_of(result)
    return s.get("mode") == "ddp" and s.get("engine", "actors") == "actors" and bool(s.get("bytes_measured"))


def sent_bytes(result):
    """The bytes a row sent: measured or computed by its engine; a computed data-parallel row's figure is the
    ring formula's (older files computed it with the parameter-server formula)."""
    s = summary_of(result)
    if s.get("mode") == "ddp" and not s.get("bytes_measured"):
        r = ring_bytes(result)
        return 0 if r is None else r
    return s["bytes_sent"]


def baseline(result, measured_ddp=None):
    """(bytes, basis) of the data-parallel baseline for `result`: a measured job's bytes_sent where one is given
    (same tokens and M), else the ring formula's (computed); (None, None) at M <= 1."""
    if learners(result) <= 1:
        return None, None
    if measured_ddp is not None:
        return summary_of(measured_ddp)["bytes_sent"], "measured"
    return ring_bytes(result), "computed"


def ddp_ratio(result, measured_ddp=None):
    """Baseline bytes / bytes sent; None at M <= 1 or when nothing was sent."""
    base, _ = baseline(result, measured_ddp)
    sent = sent_bytes(result)
    if base is None or not sent:
        return None
    return base / sent


def fmt_ratio(r, digits=0):
    return "—" if r is None else f"{r:,.{digits}f}×"


def commit_known(commit):
    """True when `commit` is a commit of this repository, False when not, None when there is no git history."""
    try:
        out = subprocess.run(["git", "-C", ROOT, "cat-file", "-e", f"{commit}^{{commit}}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode == 0:
        return True
    has_history = subprocess.run(["git", "-C", ROOT, "rev-parse", "--verify", "-q", "HEAD"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    return False if has_history else None


def commit_text(commit):
    """`abc1234`, or the hash with a note where this repository's history does not hold it."""
    if commit_known(commit) is False:
        return f"{commit} (a commit not in this repository's history)"
    return f"`{commit}`"
