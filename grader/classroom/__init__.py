"""What an instructor adds: a class's submissions graded in one run (grade.py), from folders or
archives (submissions.py), into a gradebook, Gradescope results and feedback (reports.py)."""
from .grade import grade_class
from .reports import HIDDEN, POINTS, score, write_reports
from .submissions import discover, locate

__all__ = ["HIDDEN", "POINTS", "discover", "grade_class", "locate", "score", "write_reports"]
