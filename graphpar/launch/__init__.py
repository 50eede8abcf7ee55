"""``graphpar launch``: start, supervise and restart the processes of a job on this node.

``cli`` parses both spellings (``--nproc N --devices-per-proc K`` and msrun's ``--worker_num`` ...), ``config``
resolves them (with ``hostfile``) into a :class:`~graphpar.launch.config.LaunchConfig`, ``environment`` writes each
child's variables, ``supervisor`` runs the children (``exits`` tells how a worker ended, early or not) and ``logs``
streams and quotes their logs.
"""

from graphpar.launch.config import LaunchConfig as LaunchConfig
from graphpar.launch.supervisor import Supervisor as Supervisor
