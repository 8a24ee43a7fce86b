"""The gRPC API: the OpenAI chat, completion, embedding and model calls over gRPC (grpcio).

    inference.proto           the service and its messages (the contract; clients generate from it)
    inference_pb2*.py(i)      generated from it by grpc_tools.protoc, committed (a test keeps them equal)
    config.py                 ``[grpc]``: enabled, port
    messages.py               proto messages <-> the OpenAI types the pipeline speaks
    status.py                 gateway errors -> gRPC status codes and trailing metadata
    servicer.py               ``InferenceServicer``: authenticate, parse, call the inference service
    server.py                 ``GrpcServer``: the grpc.aio server in the gateway's event loop

Each call runs the pipeline the HTTP routes run (``gateway.inference``), not a copy of it.
Importing this package imports no grpc: the settings read ``config`` alone.
"""
