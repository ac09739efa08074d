"""DSP schedule rules, in priority order (fallback last): blocks sized by the chips' local memory."""
from .fallback import Fallback
from .layer_norm_backward import LayerNormBackward
from .lstm_cell_backward import LstmCellBackward
from .lstm_layer import LstmLayerBackward, LstmLayerForward

RULES = (LstmCellBackward(), LayerNormBackward(), LstmLayerForward(), LstmLayerBackward(), Fallback())
