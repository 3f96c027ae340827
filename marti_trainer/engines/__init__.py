"""Training engines behind one interface: :class:`Engine` (``step``, ``state_dict``, ``save``).

``torch`` (:class:`TorchEngine`): plain PyTorch AdamW on fp32 master weights with optional
bf16 autocast. ``deepspeed`` (:class:`DeepSpeedEngine`): the same update through
``deepspeed.initialize`` with ZeRO stage 0-3 (gloo on CPU, nccl on GPU). Build one with
:func:`make_engine`; DeepSpeed is imported only when used.
"""

from marti_trainer.engines.base import Engine, lr_lambda
from marti_trainer.engines.factory import make_engine
from marti_trainer.engines.torch_engine import TorchEngine

__all__ = ["Engine", "TorchEngine", "lr_lambda", "make_engine"]
