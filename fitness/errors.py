"""The one exception type for errors a user can cause (bad config, missing workload, bad file)."""


class EvoError(Exception):
    """A problem the user can fix; the message names the key, file or variable at fault.

    The CLI prints it without a traceback and exits 2.
    """
