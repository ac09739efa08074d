"""LLVM CPU schedule rules, in priority order (fallback last)."""
from .fallback import Fallback
from .layer_norm_backward import LayerNormBackward
from .lstm_cell_backward import LstmCellBackward
from .matmul import ColumnSum, Matmul, MatmulTN

RULES = (LstmCellBackward(), LayerNormBackward(), Matmul(), MatmulTN(), ColumnSum(), Fallback())
