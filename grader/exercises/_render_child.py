"""Renders a learner's Jinja2 template apart from the grader: run as a script, in a process of its own
under limits that hold on every thread (address space, CPU time, output size), it reads
{"template", "contexts", "seconds", "max_chars"} as JSON on stdin and writes {"sources": [...]} or
{"error": {"type", "message", "lineno"}} on stdout. It imports nothing of the grader's: what a template
can reach here is Jinja2's sandbox, and what it can use up is this process's."""
import json
import sys

MEMORY_BYTES = 1 << 30     # address space: the interpreter and Jinja2 need ~100 MB, a rendering far less
MAX_CHARS = 4 << 20        # characters of one rendered source (a course kernel is a few thousand)


def environment():
    """How the exercise's template is rendered: in Jinja2's sandbox (no internals of any Python object;
    a range holds at most 100,000 numbers); an undefined name is an error (not an empty string); a line
    holding only a {% tag %} or {# comment #} leaves no blank line behind."""
    import jinja2
    from jinja2.sandbox import SandboxedEnvironment

    return SandboxedEnvironment(undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                                keep_trailing_newline=True)


def _limit(seconds: float) -> None:
    import math
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    cpu = max(1, math.ceil(seconds))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))


def main() -> None:
    request = json.loads(sys.stdin.read())
    _limit(request["seconds"])
    try:
        env = environment()
        template = env.from_string(request["template"])
        sources = []
        for context in request["contexts"]:
            size, parts = 0, []
            for chunk in template.generate(**context):
                size += len(chunk)
                if size > request.get("max_chars", MAX_CHARS):
                    raise OverflowError(f"a rendered source longer than {request.get('max_chars', MAX_CHARS):,} "
                                        "characters")
                parts.append(chunk)
            sources.append("".join(parts))
        out = {"sources": sources}
    except MemoryError:
        out = {"error": {"type": "MemoryError", "message": f"rendering needed more than {MEMORY_BYTES >> 20} MiB",
                         "lineno": None}}
    except Exception as e:  # noqa: BLE001 (a Jinja2 error, the sandbox's refusal, the output limit)
        out = {"error": {"type": type(e).__name__, "message": str(getattr(e, "message", None) or e),
                         "lineno": getattr(e, "lineno", None)}}
    sys.stdout.write(json.dumps(out))


STARTUP_S = 10.0  # the child's own start (an interpreter and Jinja2) on a loaded machine


class RenderTimeout(RuntimeError):
    pass


class RenderRefused(RuntimeError):
    """The template's rendering failed or was stopped: `kind` is what stopped it (UndefinedError,
    SecurityError, MemoryError, OverflowError, ...)."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind = kind


def render_isolated(template_text: str, contexts: list[dict], seconds: float) -> list[str]:
    """`template_text` rendered with each of `contexts` (JSON values) in a child process (this file run as
    a script) under MEMORY_BYTES of address space, `seconds` of CPU per rendering and MAX_CHARS per
    source. A syntax error comes back as jinja2.TemplateSyntaxError with its line; the rest as
    RenderRefused or RenderTimeout."""
    import subprocess

    total = seconds * max(1, len(contexts))
    request = json.dumps({"template": template_text, "contexts": contexts, "seconds": total, "max_chars": MAX_CHARS})
    try:
        proc = subprocess.run([sys.executable, "-I", __file__], input=request, capture_output=True, text=True,
                              timeout=total + STARTUP_S)
    except subprocess.TimeoutExpired:
        raise RenderTimeout(f"rendering took longer than {seconds:g} s a specialization") from None
    if proc.returncode != 0:
        if proc.returncode in (-24, -9):  # SIGXCPU, then SIGKILL at the hard limit: out of CPU time
            raise RenderTimeout(f"rendering took longer than {seconds:g} s a specialization")
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise RenderRefused("stopped", f"the renderer exited with status {proc.returncode}: {last}")
    out = json.loads(proc.stdout)
    if "error" in out:
        err = out["error"]
        if err["type"] == "TemplateSyntaxError":
            import jinja2

            raise jinja2.TemplateSyntaxError(err["message"], err["lineno"] or 1)
        raise RenderRefused(err["type"], err["message"])
    return out["sources"]


if __name__ == "__main__":
    main()
