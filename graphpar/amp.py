"""``mindspore.amp``: mixed precision levels, loss scale managers (``Model``), the functional loss scalers
(``DynamicLossScaler``, ``StaticLossScaler``) and overflow checks (see ``graphpar.train.amp``)."""

from graphpar.nn.loss_scale import all_finite as all_finite
from graphpar.train.amp import auto_mixed_precision as auto_mixed_precision
from graphpar.train.amp import build_train_network as build_train_network
from graphpar.train.amp import get_black_list as get_black_list
from graphpar.train.amp import get_white_list as get_white_list
from graphpar.train.loss_scale_manager import DynamicLossScaleManager as DynamicLossScaleManager
from graphpar.train.loss_scale_manager import FixedLossScaleManager as FixedLossScaleManager
from graphpar.train.loss_scale_manager import LossScaleManager as LossScaleManager
from graphpar.train.loss_scaler import DynamicLossScaler as DynamicLossScaler
from graphpar.train.loss_scaler import LossScaler as LossScaler
from graphpar.train.loss_scaler import StaticLossScaler as StaticLossScaler
