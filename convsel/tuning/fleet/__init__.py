"""A tuning store shared by a fleet: devices upload what they measured, anyone asks for any
device class's answer.

- :mod:`.checks`: what an uploaded entry must be (known algorithms and variants, positive
  finite times, bounded strings and counts).
- :mod:`.uploads`: :func:`receive` stores an upload in one transaction, all or nothing, each
  entry accepted, merged, flagged or rejected, with who sent it and when.
- :mod:`.merge`: several measurements of one shape on one device class as robust statistics;
  a winner two uploads disagree on beyond the noise is flagged, not overwritten.
- :mod:`.devices`: the device classes a store knows (``GET /v1/devices``) and a class named
  by ``device=``.
- :mod:`.jobs`: fitting a class's model off the request path, as a job any replica reports on.

The shipped, read-only layer beneath the user's store is :mod:`convsel.tuning.system`.
"""

from .checks import LIMITS, Limits
from .devices import device_classes, resolve, stored_class
from .jobs import fit_class
from .jobs import get as get_fit_job
from .jobs import run as run_fit_job
from .jobs import stop as stop_fit_job
from .jobs import submit as submit_fit_job
from .uploads import Outcome, UploadRefused, UploadReport, receive, uploads_of

__all__ = ["LIMITS", "Limits", "Outcome", "UploadRefused", "UploadReport", "device_classes",
           "fit_class", "get_fit_job", "receive", "resolve", "run_fit_job", "stop_fit_job",
           "stored_class", "submit_fit_job", "uploads_of"]
