"""ACL's conv2d heuristics: the validate() predicates and get_convolution_method() control flow.

Everything here is pure: a ConvProblem, a Target and the Rules in, verdicts and a trace out.
"""
