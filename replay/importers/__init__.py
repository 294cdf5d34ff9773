"""Trace importers: public cluster traces to gpuledger logs of external inputs.

An importer writes only what came from outside the scheduler (configuration, node
registrations, submissions, cancellations), in time order, so `gpuledger replay` or the
simulator can decide everything else under any policy.
"""

from gpuledger.replay.importers.openb import OpenbImport, TraceImportError, import_openb

__all__ = ["OpenbImport", "TraceImportError", "import_openb"]
