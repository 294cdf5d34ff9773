"""The openb benchmark: the FGD paper's evaluation protocol over the Alibaba openb trace."""
