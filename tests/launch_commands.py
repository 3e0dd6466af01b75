"""Reading back the SGLang launch commands sacmodel emits (shared by the emit and role-search tests)."""
import shlex


def parse(text: str) -> dict:
    """The emitted command as flag -> value (True for a switch); comment lines skipped; every word after the
    launcher is a flag or its value, and no flag is given twice."""
    body = " ".join(ln.rstrip("\\").strip() for ln in text.splitlines() if not ln.startswith("#"))
    words = shlex.split(body)
    assert words[:3] == ["python3", "-m", "sglang.launch_server"]
    out, i = {}, 3
    while i < len(words):
        flag = words[i]
        assert flag.startswith("--") and flag not in out, flag
        if i + 1 < len(words) and not words[i + 1].startswith("--"):
            out[flag], i = words[i + 1], i + 2
        else:
            out[flag], i = True, i + 1
    return out
