"""Why a measurement is as fast as it is: the limit model (``limits``), pure Python, no Django."""
