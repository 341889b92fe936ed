"""The MoE training step: specs, chunk model, streams, memory, and the step simulation."""
