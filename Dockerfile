# One image for every gpuledger service; compose picks the role with `gpuledger run ROLE`.
# The wheel is built in a stage of its own; the image installs it (pure Python).
FROM python:3.12 AS wheel
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY events ./events
COPY services ./services
COPY projections ./projections
COPY replay ./replay
RUN pip wheel --no-cache-dir --no-deps -w /wheels .

FROM python:3.12-slim
# the services need the server extra (the base install is the light client: docs/install.md)
WORKDIR /app
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir "$(echo /wheels/gpuledger-*.whl)[server]" && rm -rf /wheels && useradd --system gpuledger \
 && mkdir -p /var/lib/gpuledger && chown gpuledger /var/lib/gpuledger
# The projector's data directory (compose mounts the `projection` volume here): a new named
# volume takes this directory's owner, so the container user can write the projection.
USER gpuledger
ENTRYPOINT ["gpuledger"]
