"""What a learner's check uses: static source and SASS checks, the isolated and supervised
grading process (worker), comparisons, the result, and `check()` itself."""
from .pipeline import check, default_source, prepare, run, seed_list
from .result import Item, Result
from .static import link_checks, sass_checks, static_checks
from .supervise import Prepared, RunOptions

__all__ = ["Item", "Prepared", "Result", "RunOptions", "check", "default_source", "prepare", "run",
           "link_checks", "sass_checks", "seed_list", "static_checks"]
