"""Process-wide settings: ``set_context`` and ``set_auto_parallel_context`` with MindSpore's names and defaults.

The settings are read by the compile stage when a train step is built, never by passes at run time, so changing a
setting between two ``Model`` builds takes effect on the next build (as in MindSpore, where the context must be set
before the network is compiled).

``values`` says what each setting accepts, ``devices`` checks the device settings against this machine, ``state``
holds the settings and the API over them.
"""

from graphpar._context.algo import AlgoParameters as AlgoParameters
from graphpar._context.algo import OpStrategyConfig as OpStrategyConfig
from graphpar._context.algo import current_algo as current_algo
from graphpar._context.cost_model import current_cost_model as current_cost_model
from graphpar._context.algo import current_op_strategy_config as current_op_strategy_config
from graphpar._context.algo import get_algo_parameters as get_algo_parameters
from graphpar._context.algo import reset_algo_parameters as reset_algo_parameters
from graphpar._context.algo import reset_op_strategy_config as reset_op_strategy_config
from graphpar._context.algo import set_algo_parameters as set_algo_parameters
from graphpar._context.algo import set_op_strategy_config as set_op_strategy_config
from graphpar._context.devices import check_device_id as check_device_id
from graphpar._context.devices import check_platform as check_platform
from graphpar._context.state import AutoParallelContext as AutoParallelContext
from graphpar._context.cache_dir import CompileCache as CompileCache
from graphpar._context.state import Context as Context
from graphpar._context.state import compile_cache as compile_cache
from graphpar._context.state import compile_key as compile_key
from graphpar._context.state import current as current
from graphpar._context.state import current_parallel as current_parallel
from graphpar._context.state import get_auto_parallel_context as get_auto_parallel_context
from graphpar._context.state import get_context as get_context
from graphpar._context.state import register_rank_source as register_rank_source
from graphpar._context.state import overlaid as overlaid
from graphpar._context.state import reset_auto_parallel_context as reset_auto_parallel_context
from graphpar._context.state import reset_context as reset_context
from graphpar._context.state import set_auto_parallel_context as set_auto_parallel_context
from graphpar._context.state import set_context as set_context
from graphpar._context.state import settings as settings
from graphpar._context.state import settings_revision as settings_revision
from graphpar._context.values import DEVICE_TARGETS as DEVICE_TARGETS
from graphpar._context.values import GRAPH_MODE as GRAPH_MODE
from graphpar._context.values import OPTIMIZER_LEVELS as OPTIMIZER_LEVELS
from graphpar._context.values import PARALLEL_OPTIMIZER_DEFAULTS as PARALLEL_OPTIMIZER_DEFAULTS
from graphpar._context.values import PIPELINE_SCHEDULERS as PIPELINE_SCHEDULERS
from graphpar._context.values import PYNATIVE_MODE as PYNATIVE_MODE
from graphpar._context.values import SEARCH_MODES as SEARCH_MODES
from graphpar._context.values import ParallelMode as ParallelMode
from graphpar._context.values import check_pipeline_config as check_pipeline_config
from graphpar._context.values import parse_memory as parse_memory
