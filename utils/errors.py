"""The project's one error base class: every bad input the code detects raises a YoloError subclass.

Each message is one line that says what is wrong and, where it helps, what to do; utils.cli.run_cli prints it
as ``ERROR: ...`` and exits 1, so no command ends in a traceback for a bad input.
"""


class YoloError(Exception):
    """A request that cannot be carried out (bad file, flag, dataset or device); the message is one line."""
