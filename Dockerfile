# One image for every gpuledger service; compose picks the role with `gpuledger run ROLE`.
FROM python:3.12-slim
WORKDIR /app
COPY pyproject.toml setup.py README.md ./
COPY events ./events
COPY services ./services
COPY projections ./projections
COPY replay ./replay
RUN pip install --no-cache-dir . && useradd --system gpuledger
USER gpuledger
ENTRYPOINT ["gpuledger"]
