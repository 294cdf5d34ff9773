# One image for every gpuledger service; compose picks the role with `gpuledger run ROLE`.
# The wheel is the compiled build (setup.py, GPULEDGER_COMPILE=1: the deciding and folding
# modules compiled with Cython), made in a stage that has a C compiler; the image has none.
# `docker build --build-arg GPULEDGER_COMPILE=0 .` makes the pure-Python image.
FROM python:3.12 AS wheel
ARG GPULEDGER_COMPILE=1
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY events ./events
COPY services ./services
COPY projections ./projections
COPY replay ./replay
RUN GPULEDGER_COMPILE=${GPULEDGER_COMPILE} pip wheel --no-cache-dir --no-deps -w /wheels .

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
