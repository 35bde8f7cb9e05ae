"""PySpark integration for pyrmq (UDF-based producers and a `rocketmq` data
source). It is built on the pyrmq client, which comes with the broker; this
package is empty until then. Installed with `pip install .[spark]`."""
