"""Formula layer: lme4-style random-effect bars on top of formulaic's fixed-effect formulas."""

from .bars import Bar, ParsedFormula, parse_formula
from .design import Design, ReTerm, build_design

__all__ = ["Bar", "ParsedFormula", "parse_formula", "Design", "ReTerm", "build_design"]
