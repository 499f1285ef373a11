"""Experiment configs: one `get_config(arg)` per LRA task on the shared base in `common`.

Run `python run.py --config configs/<task>.py:<variant>[,runlocal] --workdir DIR`.
"""
