"""Why a measurement is as fast as it is: the limit model (``limits``, pure Python, no Django) and its use on a
benchmark's newest cells (``cells``, run by the analysis after each ingest; the answer stored on the measurement)."""
