"""The architectures :func:`attnkit.pretrained.load_checkpoint` reads, by ``model_type``.

A new architecture is a module that defines its config reader, network options and tensor table and
exports an :class:`~attnkit.pretrained.architecture.Architecture` as ``ARCHITECTURE``, plus one line here.
"""

from attnkit.pretrained import bert
from attnkit.pretrained.architecture import Architecture, unsupported_model_type

__all__ = ["ARCHITECTURES", "architecture_for"]

ARCHITECTURES: dict[str, Architecture] = {architecture.model_type: architecture for architecture in (
    bert.ARCHITECTURE,
)}


def architecture_for(fields, source):
    """The architecture of a checkpoint whose config fields are ``fields``.

    Raises
    ------
    ValueError
        If ``fields`` is not a JSON object, or its ``model_type`` is none of :data:`ARCHITECTURES`
        (the message lists those).
    """
    if not isinstance(fields, dict):
        raise ValueError(f"{source} must hold a JSON object, got {type(fields).__name__}")
    model_type = fields.get("model_type")
    if not isinstance(model_type, str) or model_type not in ARCHITECTURES:
        raise unsupported_model_type(model_type, [a.reads for a in ARCHITECTURES.values()], source)
    return ARCHITECTURES[model_type]
