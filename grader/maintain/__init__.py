"""Maintainer tools: the GPU runs (verify, self_test, class_benchmark, ncu_jupyter; what they share: runs)
and the corpus of known-wrong and known-right submissions (corpus). Never copied into a student's grading run."""
