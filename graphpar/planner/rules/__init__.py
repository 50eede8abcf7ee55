"""Per-kind sharding rules (see ``graphpar.planner.dims``): graphpar ops and raw jax primitives.

Importing this package registers every rule (each module files its rules with ``dims.register`` as it is
imported); look rules up through :func:`rule_for` from here, which is then sure to find them.
"""

from graphpar.planner.dims import rule_for as rule_for
from graphpar.planner.rules import conv_rules as conv_rules
from graphpar.planner.rules import index_rules as index_rules
from graphpar.planner.rules import lax_rules as lax_rules
from graphpar.planner.rules import misc_rules as misc_rules
from graphpar.planner.rules import norm_act_rules as norm_act_rules
from graphpar.planner.rules import op_rules as op_rules
from graphpar.planner.rules import pool3d_rules as pool3d_rules
from graphpar.planner.rules import structured_rules as structured_rules
from graphpar.planner.rules import fft_rules as fft_rules
from graphpar.planner.rules import selection_rules as selection_rules
from graphpar.planner.rules import box_linalg_rules as box_linalg_rules
from graphpar.planner.rules import math_extra_rules as math_extra_rules
from graphpar.planner.rules import random_extra_rules as random_extra_rules
from graphpar.planner.rules import image_rules as image_rules
from graphpar.planner.rules import scatter_rules as scatter_rules
from graphpar.planner.rules import infer_attention_rules as infer_attention_rules
