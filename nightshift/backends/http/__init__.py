"""The http backend: jobs of any HTTP job API, declared in the catalogue (``backend: http``).

``backend`` speaks the protocol, ``rules`` holds its pure parts (paths, states, what answers
mean, SSE), ``api`` a job's API as the backend uses it, ``stream`` the SSE reader.
"""

from nightshift.backends.http.api import LostJobError, StreamDropped
from nightshift.backends.http.backend import HttpBackend

__all__ = ["HttpBackend", "LostJobError", "StreamDropped"]
