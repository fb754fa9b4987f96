def patch(model):
    raise NotImplementedError
