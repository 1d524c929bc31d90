"""Launchers: how a trial's entrypoint starts one training process per slot.

``python -m harness.launch.torch_distributed [TORCHRUN_OPTIONS... --] SCRIPT...`` runs SCRIPT
under torchrun on every agent of the trial, as Determined's ``determined.launch.
torch_distributed`` does.
"""
