# One image for every gpuledger service; compose picks the role with `gpuledger run ROLE`.
FROM python:3.12-slim
WORKDIR /app
COPY pyproject.toml setup.py README.md ./
COPY events ./events
COPY services ./services
COPY projections ./projections
COPY replay ./replay
RUN pip install --no-cache-dir . && useradd --system gpuledger \
 && mkdir -p /var/lib/gpuledger && chown gpuledger /var/lib/gpuledger
# The projector's data directory (compose mounts the `projection` volume here): a new named
# volume takes this directory's owner, so the container user can write the projection.
USER gpuledger
ENTRYPOINT ["gpuledger"]
