"""Maintainer tools: the GPU verification runs and the known-wrong submissions corpus. Never copied
into a student's grading run."""
