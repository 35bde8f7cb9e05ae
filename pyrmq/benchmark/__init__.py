"""`pyrmq bench`: load generators after RocketMQ's benchmark tools
(org.apache.rocketmq.example.benchmark), on pyrmq's asyncio client.
`cli` parses and reports, `workloads` produces and consumes, `runner` runs
them in one process or several, `stats` counts, `report` prints."""
